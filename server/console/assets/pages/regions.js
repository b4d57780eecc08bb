// Regions & streams: an hour of a global limit split across regions, evenly and rebalanced by
// demand (POST v1/console/regions/simulate, the simulation of `sluice simulate regions`), and
// stream mode's queries with a chart of one query's recent windows (GET v1/console/streams, then
// GET v1/streams/{stream}/windows). Region names, query names and keys reach the page only
// through textContent (lib.js's h).
import { h, num, pct, duration, localTime, errorText, markRendered } from '../lib.js';

export const title = 'Regions & streams';

const REFRESH_MS = 5000;
const MAX_REGIONS = 64; // the server's bound (regionsim.MaxRegions)
const RECENT_WINDOWS = 120; // window starts the streams chart keeps
const PAGE = 1000; // the windows route's largest page
const MAX_PAGES = 20; // pages one catch-up reads, so that a huge stream cannot stall the tab
const REGION_NAME = /^[A-Za-z0-9._-]{1,64}$/; // regionsim.CheckRegionName's rule
const EXAMPLE = [['mumbai', 600], ['frankfurt', 200], ['virginia', 100]]; // docs/regions.md's

const regionColor = (i) => `--c${(i % 8) + 1}`;

// scrollable wraps a table that may scroll sideways on a narrow screen. These tables hold no
// links, so the wrapper itself is a named tab stop, for a keyboard to scroll it.
const scrollable = (label, table) => h('div', { class: 'table-wrap', tabindex: '0', role: 'region', 'aria-label': label }, table);

export function mount(root, ctx) {
  const rendered = markRendered('regions');
  let alive = true;
  const cleanups = [];

  // ---- regions: the form ------------------------------------------------------------------
  const limit = h('input', { id: 'regions-limit', type: 'number', min: '1', step: '1', required: true, value: '900', inputmode: 'numeric' });
  const floor = h('input', { id: 'regions-floor', type: 'number', min: '0', max: '0.99', step: '0.01', value: '0.1' });
  const rows = h('div', { id: 'regions-rows' });
  const addBtn = h('button', { type: 'button' }, 'Add a region');
  const runBtn = h('button', { type: 'submit', class: 'primary' }, 'Simulate the hour');
  const simStatus = h('p', { id: 'regions-status', class: 'status', role: 'status' });
  const form = h('form', { id: 'regions-form', novalidate: true },
    h('div', { class: 'row' },
      h('div', { class: 'field' }, h('label', { for: 'regions-limit' }, 'Global limit per minute'), limit),
      h('div', { class: 'field' }, h('label', { for: 'regions-floor' }, 'Floor (0 to below 1)'), floor)),
    h('fieldset', {},
      h('legend', {}, 'Demand per minute at the start of the hour'),
      h('p', { class: 'muted' }, 'Each region hands its demand to the next one over the middle half hour (the last to the first).'),
      rows, addBtn),
    h('div', { class: 'row' }, runBtn),
    simStatus);

  let rowSeq = 0;
  function addRow(name = '', demand = '') {
    const id = ++rowSeq;
    const nameIn = h('input', { id: `region-name-${id}`, class: 'region-name', value: name, maxlength: '64', autocomplete: 'off', spellcheck: 'false' });
    const demandIn = h('input', { id: `region-demand-${id}`, class: 'region-demand', type: 'number', min: '0', step: '1', value: String(demand), inputmode: 'numeric' });
    const row = h('div', { class: 'row region-row' },
      h('div', { class: 'field' }, h('label', { for: nameIn.id }, 'Region'), nameIn),
      h('div', { class: 'field' }, h('label', { for: demandIn.id }, 'Demand'), demandIn));
    const remove = h('button', {
      type: 'button',
      onclick: () => {
        row.remove();
        syncButtons();
        (rows.querySelector('.region-name') || addBtn).focus();
      },
    }, 'Remove');
    row.append(remove);
    const label = () => remove.setAttribute('aria-label', `Remove region ${nameIn.value || id}`);
    nameIn.addEventListener('input', label);
    label();
    rows.append(row);
    syncButtons();
    return nameIn;
  }
  function syncButtons() {
    const n = rows.children.length;
    addBtn.disabled = n >= MAX_REGIONS;
    for (const b of rows.querySelectorAll('button')) b.disabled = n <= 1;
  }
  addBtn.addEventListener('click', () => addRow().focus());
  for (const [name, d] of EXAMPLE) addRow(name, d);

  // ---- regions: the results -----------------------------------------------------------------
  const summary = h('p', { id: 'regions-summary' });
  const shareEl = h('div', { id: 'regions-share-chart', class: 'chart', role: 'img', 'aria-label': 'Per region, each minute of the hour: demand (dashed), rebalanced share (solid) and the even share (dotted). The table below has the totals.' });
  const servedEl = h('div', { id: 'regions-served-chart', class: 'chart', role: 'img', 'aria-label': 'All regions, each minute of the hour: the servable demand, and what the even split and the rebalanced shares served. The table below has the totals.' });
  const tableBox = h('div', { id: 'regions-table' });
  const results = h('div', { hidden: true },
    summary,
    h('h3', {}, 'Demand and shares per region'), shareEl,
    h('h3', {}, 'Served, all regions'), servedEl,
    tableBox);

  // ---- streams ------------------------------------------------------------------------------
  const streamsStatus = h('p', { id: 'streams-status', role: 'status' });
  const streamsBox = h('div', { id: 'streams-table' });
  const querySel = h('select', { id: 'streams-query' });
  const windowsStatus = h('p', { id: 'streams-windows-status', role: 'status' });
  const windowsEl = h('div', { id: 'streams-windows-chart', class: 'chart', role: 'img', 'aria-label': "The chosen query's recent windows: events per window across all keys, the busiest key's, and the quota." });
  const windowsBox = h('div', { id: 'streams-windows-table' });
  const windowsPart = h('div', { hidden: true },
    h('div', { class: 'row' }, h('div', { class: 'field' }, h('label', { for: 'streams-query' }, 'Windows of the query'), querySel)),
    windowsStatus, windowsEl, windowsBox);

  root.append(
    h('section', { 'aria-labelledby': 'regions-h' },
      h('h2', { id: 'regions-h' }, 'Regions: one global limit split across regions'),
      h('p', { class: 'muted' }, 'An hour, a minute at a time, as sluice simulate regions --plot replays it: an even split against shares rebalanced every minute from the minute before. Nothing on the server changes.'),
      form, results),
    h('section', { 'aria-labelledby': 'streams-h' },
      h('h2', { id: 'streams-h' }, 'Streams'),
      streamsStatus, streamsBox, windowsPart));

  // ---- regions: running ---------------------------------------------------------------------
  let simSeq = 0;
  async function simulate() {
    const demand = {};
    for (const row of rows.querySelectorAll('.region-row')) {
      const nameIn = row.querySelector('.region-name');
      const name = nameIn.value.trim();
      if (!REGION_NAME.test(name)) { // the server says so too, but not which row
        fail(`Region ${JSON.stringify(name)}: a name is 1 to 64 letters, digits and ._-`, nameIn);
        return;
      }
      if (Object.hasOwn(demand, name)) {
        fail(`Region ${name} is given twice.`, nameIn);
        return;
      }
      // An object keeps the order given, which is the order demand moves in, except for names
      // that are whole numbers: JavaScript puts those first.
      const d = row.querySelector('.region-demand').value.trim();
      demand[name] = d === '' ? null : Number(d);
    }
    const body = { limit: limit.value.trim() === '' ? null : Number(limit.value), demand };
    if (floor.value.trim() !== '') body.floor = Number(floor.value);
    const mine = ++simSeq;
    runBtn.disabled = true;
    simStatus.classList.remove('error');
    simStatus.textContent = 'Simulating…';
    try {
      const res = await ctx.api('v1/console/regions/simulate', { method: 'POST', body });
      if (!alive || mine !== simSeq) return;
      drawSimulation(res);
      simStatus.textContent = '';
    } catch (e) {
      if (!alive || mine !== simSeq) return;
      fail(errorText(e), fieldOf(e.message));
    } finally {
      if (alive && mine === simSeq) runBtn.disabled = false;
    }
  }

  function fail(text, focus) {
    simStatus.classList.add('error');
    simStatus.textContent = text;
    if (focus) focus.focus();
  }

  // fieldOf finds the input a 400's message names ("console: demand.mumbai: ...").
  function fieldOf(msg) {
    const m = /^console: (limit|floor|demand)(?:\.([A-Za-z0-9._-]+))?:/.exec(msg || '');
    if (!m) return null;
    if (m[1] === 'limit') return limit;
    if (m[1] === 'floor') return floor;
    for (const row of rows.querySelectorAll('.region-row')) {
      if (m[2] && row.querySelector('.region-name').value.trim() === m[2]) return row.querySelector('.region-demand');
    }
    return rows.querySelector('.region-name');
  }

  let shareChart = null, servedChart = null;
  function drawSimulation(res) {
    results.hidden = false;
    const minutes = Array.from({ length: res.minutes }, (_, i) => i);
    const t = res.totals;
    summary.textContent = `Over the hour, of ${num(t.servable)} requests servable (the demand, capped at the limit of ${num(res.limit)} a minute), `
      + `the even split served ${num(t.servedEven)} (${pct(t.servedEven, t.servable)}) and the rebalanced shares ${num(t.servedRebalanced)} `
      + `(${pct(t.servedRebalanced, t.servable)}). Floor ${res.floor}, rebalanced every ${res.every} min.`;

    const line = (label, stroke, extra = {}) => ({ label, stroke, width: 1.5, points: { show: false }, ...extra });
    const minuteAxis = { label: 'minute', values: (u, ticks) => ticks.map(String) };
    const opts = (series) => ({ height: 280, scales: { x: { time: false } }, series: [{ label: 'minute' }, ...series], axes: [minuteAxis, { size: 64 }] });

    // Top panel: demand dashed and the rebalanced share solid in each region's color; one even
    // line stands for all, since even shares differ by at most one.
    const shareSeries = [line('even share', '--muted', { dash: [2, 4] })];
    const shareData = [minutes, res.regions.length ? res.regions[0].even : []];
    res.regions.forEach((r, i) => {
      shareSeries.push(line(`${r.name} demand`, regionColor(i), { dash: [6, 4] }));
      shareSeries.push(line(`${r.name} share`, regionColor(i), { width: 2 }));
      shareData.push(r.demand, r.rebalanced);
    });
    // The series change with the regions: a new chart each run.
    if (shareChart) shareChart.destroy();
    shareChart = ctx.chart(shareEl, opts(shareSeries), shareData);

    const f = res.fleet;
    if (servedChart) servedChart.destroy();
    servedChart = ctx.chart(servedEl, opts([
      line('servable', '--fg', { width: 1 }),
      line('served, even split', '--muted', { dash: [6, 4], width: 2 }),
      line('served, rebalanced', '--allowed', { width: 2 }),
    ]), [minutes, f.servable, f.servedEven, f.servedRebalanced]);

    const cols = ['Demand', 'Even share', 'Served, even', 'Rebalanced share', 'Served, rebalanced'];
    const body = res.regions.map((r) => h('tr', {},
      h('th', { scope: 'row', class: 'mono' }, r.name),
      ...[r.total.demand, r.total.even, r.total.servedEven, r.total.rebalanced, r.total.servedRebalanced].map((v) => h('td', { class: 'num' }, num(v)))));
    tableBox.replaceChildren(scrollable('Per region, summed over the hour', h('table', { id: 'regions-totals' },
      h('caption', {}, 'Per region, summed over the hour'),
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Region'), ...cols.map((c) => h('th', { scope: 'col', class: 'num' }, c)))),
      h('tbody', {}, body),
      h('tfoot', {}, h('tr', {},
        h('th', { scope: 'row' }, 'All regions'),
        h('td', { class: 'num' }, num(t.demand)),
        h('td', { class: 'muted num' }, '–'),
        h('td', { class: 'num' }, num(t.servedEven)),
        h('td', { class: 'muted num' }, '–'),
        h('td', { class: 'num' }, num(t.servedRebalanced)))))));
  }

  form.addEventListener('submit', (e) => { e.preventDefault(); simulate(); });

  // ---- streams: the queries -----------------------------------------------------------------
  let queries = [];
  let streamsTimer = 0;
  let streamsSeq = 0;
  async function refreshStreams() {
    clearTimeout(streamsTimer);
    const mine = ++streamsSeq;
    try {
      const res = await ctx.api('v1/console/streams');
      if (!alive || mine !== streamsSeq) return;
      queries = res.queries || [];
      drawQueries();
      streamsStatus.classList.remove('error');
      streamsStatus.textContent = '';
      if (queries.length && windowsPart.hidden) {
        windowsPart.hidden = false;
        const want = ctx.params.get('query');
        if (want && queries.some((q) => q.name === want)) querySel.value = want;
        selectQuery();
      } else if (!windowsPart.hidden) {
        await refreshWindows();
      }
    } catch (e) {
      if (!alive || mine !== streamsSeq) return;
      streamsStatus.classList.add('error');
      streamsStatus.textContent = errorText(e);
    }
    if (alive && !document.hidden) streamsTimer = setTimeout(refreshStreams, REFRESH_MS);
  }

  function drawQueries() {
    if (!queries.length) {
      streamsBox.replaceChildren(h('p', {}, 'Stream mode is off on this server, or it has no queries (the streams section of its config).'));
      windowsPart.hidden = true;
      return;
    }
    const cell = (v, f = num) => h('td', { class: 'num' }, f(v));
    const body = queries.map((q) => {
      if (q.error) {
        return h('tr', { dataset: { query: q.name } },
          h('th', { scope: 'row', class: 'mono' }, q.name),
          h('td', { class: 'mono' }, q.stream),
          cell(q.windowMs, duration),
          h('td', { colspan: 5, class: 'error' }, q.error));
      }
      return h('tr', { dataset: { query: q.name } },
        h('th', { scope: 'row', class: 'mono' }, q.name),
        h('td', { class: 'mono' }, q.stream),
        cell(q.windowMs, duration),
        cell(q.events), cell(q.open),
        h('td', { class: 'num' }, q.late ? `${num(q.late)} (cost ${num(q.lateSum)})` : '0'),
        cell(q.lagMs, (v) => (v === null || v === undefined ? 'no events yet' : duration(v))),
        h('td', {}, q.maxAt === null || q.maxAt === undefined ? '–' : localTime(q.maxAt)));
    });
    streamsBox.replaceChildren(scrollable("Stream mode's queries", h('table', { id: 'streams-queries' },
      h('caption', {}, "Stream mode's queries"),
      h('thead', {}, h('tr', {},
        h('th', { scope: 'col' }, 'Query'),
        h('th', { scope: 'col' }, 'Stream'),
        h('th', { scope: 'col', class: 'num' }, 'Window'),
        h('th', { scope: 'col', class: 'num' }, 'Events consumed'),
        h('th', { scope: 'col', class: 'num' }, 'Open windows'),
        h('th', { scope: 'col', class: 'num' }, 'Late events'),
        h('th', { scope: 'col', class: 'num' }, 'Decision lag'),
        h('th', { scope: 'col' }, 'Newest event'))),
      h('tbody', {}, body))),
    h('p', { class: 'muted' }, 'Decision lag: how far, in event time, the newest event a query has consumed is past the end of its last closed window. '
      + 'Windows are decided as they close, so that is the span of events not yet decided: at least the part of a window the newest event is into, plus the grace. '
      + 'Events appended but not yet consumed are not in it.'));
    const keep = querySel.value;
    querySel.replaceChildren(...queries.map((q) => h('option', { value: q.name }, q.name)));
    if (queries.some((q) => q.name === keep)) querySel.value = keep;
  }

  // ---- streams: one query's recent windows ----------------------------------------------------
  // The windows route pages forward from an offset, and a stream's windows are numbered in a
  // sequence of their own (with PostgreSQL) or one shared with the log (in memory), so the
  // newest are found by searching for the last offset, then reading back from it.
  let chosen = null; // {name, stream, quota, after, windows}
  let windowsChart = null;
  let windowsSeq = 0;

  const windowsPath = (stream, after, n) => `v1/streams/${encodeURIComponent(stream)}/windows?after=${after}&limit=${n}`;
  const hasAfter = async (stream, after) => (await ctx.api(windowsPath(stream, after, 1))).windows.length > 0;

  // lastOffset is the offset of the stream's last window, 0 when it has none.
  async function lastOffset(stream, still) {
    if (!(await hasAfter(stream, 0))) return 0;
    let lo = 0, hi = 1024; // a window after lo, none after hi
    while (await hasAfter(stream, hi)) {
      if (!still()) return 0;
      lo = hi;
      hi *= 2;
    }
    while (hi - lo > 1 && still()) {
      const mid = Math.floor((lo + hi) / 2);
      if (await hasAfter(stream, mid)) lo = mid; else hi = mid;
    }
    return hi;
  }

  // readAfter reads the stream's windows after `after`, at most MAX_PAGES pages: {windows, after}.
  // A burst longer than that is read on the next refreshes.
  async function readAfter(stream, after, still) {
    const out = [];
    for (let p = 0; p < MAX_PAGES && still(); p++) {
      const page = (await ctx.api(windowsPath(stream, after, PAGE))).windows || [];
      out.push(...page);
      if (page.length) after = page[page.length - 1].offset;
      if (page.length < PAGE) break;
    }
    return { windows: out, after };
  }

  // readBack reads the query's windows at or below offset hi, newest first in chunks of offsets
  // that widen while they are sparse and narrow when one is too dense to read whole, until it
  // has RECENT_WINDOWS window starts, reaches offset 0, or has read MAX_PAGES pages.
  async function readBack(stream, name, hi, still) {
    let got = [], span = 4096, budget = MAX_PAGES;
    while (hi > 0 && budget > 0 && still()) {
      const from = Math.max(0, hi - span);
      const chunk = [];
      let after = from, whole = false;
      while (budget > 0) {
        budget--;
        const page = (await ctx.api(windowsPath(stream, after, PAGE))).windows || [];
        for (const w of page) if (w.offset <= hi) chunk.push(w);
        if (page.length < PAGE || page[page.length - 1].offset >= hi) { whole = true; break; }
        after = page[page.length - 1].offset;
      }
      if (!whole) { // too dense: read a narrower chunk next to hi
        if (span === 1) break;
        span = Math.max(1, Math.floor(span / 4));
        continue;
      }
      got = chunk.filter((w) => w.query === name).concat(got);
      hi = from;
      if (new Set(got.map((w) => w.start)).size >= RECENT_WINDOWS) break;
      if (chunk.length < PAGE / 2) span *= 4;
    }
    return got;
  }

  async function selectQuery() {
    const q = queries.find((x) => x.name === querySel.value) || queries[0];
    if (!q) return;
    const mine = ++windowsSeq;
    const still = () => alive && mine === windowsSeq;
    chosen = null;
    windowsStatus.classList.remove('error');
    windowsStatus.textContent = 'Reading the recent windows…';
    try {
      const last = await lastOffset(q.stream, still);
      const windows = await readBack(q.stream, q.name, last, still);
      if (!still()) return;
      chosen = { name: q.name, stream: q.stream, quota: q.quota, after: last, windows };
      drawWindows();
    } catch (e) {
      if (!still()) return;
      windowsStatus.classList.add('error');
      windowsStatus.textContent = errorText(e);
    }
  }

  // refreshWindows reads what the chosen query emitted since the last read.
  async function refreshWindows() {
    if (!chosen) return;
    const mine = windowsSeq;
    const still = () => alive && mine === windowsSeq;
    try {
      const { windows, after } = await readAfter(chosen.stream, chosen.after, still);
      if (!still()) return;
      chosen.after = after;
      chosen.windows.push(...windows.filter((w) => w.query === chosen.name));
      drawWindows();
    } catch (e) {
      if (!still()) return;
      windowsStatus.classList.add('error');
      windowsStatus.textContent = errorText(e);
    }
  }

  function drawWindows() {
    // Per window start: the events of all keys, and the busiest key's.
    const byStart = new Map();
    for (const w of chosen.windows) {
      const s = byStart.get(w.start) || { start: w.start, end: w.end, count: 0, keys: 0, top: null };
      s.count += w.count;
      s.keys++;
      if (!s.top || w.count > s.top.count) s.top = w;
      byStart.set(w.start, s);
    }
    const starts = [...byStart.values()].sort((a, b) => a.start - b.start).slice(-RECENT_WINDOWS);
    // Forget what the chart no longer shows.
    const oldest = starts.length ? starts[0].start : Infinity;
    chosen.windows = chosen.windows.filter((w) => w.start >= oldest);

    windowsStatus.classList.remove('error');
    windowsStatus.textContent = starts.length
      ? `${num(starts.length)} closed windows of ${chosen.name}, from ${localTime(starts[0].start)} to ${localTime(starts[starts.length - 1].end)}.`
      : `${chosen.name} has closed no window yet.`;
    const series = [{},
      { label: 'events, all keys', stroke: '--c1', width: 1.5, points: { show: true, size: 4 } },
      { label: 'busiest key', stroke: '--c2', width: 1.5, points: { show: true, size: 4 } }];
    const data = [starts.map((s) => s.start / 1000), starts.map((s) => s.count), starts.map((s) => s.top.count)];
    if (chosen.quota > 0) {
      series.push({ label: `quota (${num(chosen.quota)})`, stroke: '--denied', dash: [6, 4], width: 1, points: { show: false } });
      data.push(starts.map(() => chosen.quota));
    }
    if (!windowsChart || windowsChart.series.length !== series.length) {
      if (windowsChart) windowsChart.destroy();
      windowsChart = ctx.chart(windowsEl, { height: 240, series, axes: [{}, { size: 56 }] }, data);
    } else {
      windowsChart.setData(data);
    }

    // The last few windows in words: keys are user data, through textContent.
    const recent = starts.slice(-10).reverse();
    windowsBox.replaceChildren(scrollable(`The last windows of ${chosen.name}`, h('table', { id: 'streams-windows' },
      h('caption', {}, `The last windows of ${chosen.name}`),
      h('thead', {}, h('tr', {},
        h('th', { scope: 'col' }, 'Window start'),
        h('th', { scope: 'col', class: 'num' }, 'Keys'),
        h('th', { scope: 'col', class: 'num' }, 'Events'),
        h('th', { scope: 'col' }, 'Busiest key'),
        h('th', { scope: 'col', class: 'num' }, 'Its events'))),
      h('tbody', {}, recent.length ? recent.map((s) => h('tr', {},
        h('th', { scope: 'row' }, localTime(s.start)),
        h('td', { class: 'num' }, num(s.keys)),
        h('td', { class: 'num' }, num(s.count)),
        h('td', { class: 'key mono', title: s.top.key }, s.top.key),
        h('td', { class: chosen.quota > 0 && s.top.count > chosen.quota ? 'num denied' : 'num' }, num(s.top.count))))
        : h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'none'))))));
  }

  querySel.addEventListener('change', () => {
    if (windowsChart) { windowsChart.destroy(); windowsChart = null; }
    selectQuery();
  });

  const onVisible = () => { if (!document.hidden) refreshStreams(); else clearTimeout(streamsTimer); };
  document.addEventListener('visibilitychange', onVisible);
  cleanups.push(() => document.removeEventListener('visibilitychange', onVisible));

  // First data: the example's simulation and the queries, drawn (or their errors shown).
  Promise.allSettled([simulate(), refreshStreams()]).then(() => { if (alive) rendered(); });

  return () => {
    alive = false;
    clearTimeout(streamsTimer);
    for (const c of cleanups) c();
    for (const u of [shareChart, servedChart, windowsChart]) if (u) u.destroy();
  };
}
