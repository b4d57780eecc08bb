-- lists.lua: states that are lists of pairs of doubles, 16 bytes each ('<dd'), as slidingwindow.lua
-- and slidinglog.lua keep them. A trailing part shorter than a pair is ignored.
--@
local function pairs_of(text)
  local list = {}
  for at = 1, #text - 15, 16 do
    local a, b = unpack_struct('<dd', text, at)
    list[#list + 1] = {a, b}
  end
  return list
end
local function pack2(st) return pack('<dd', st[1], st[2]) end
