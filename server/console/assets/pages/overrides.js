// Overrides: the per-key plans and limits of one policy, a page of 100 at a time in key order
// (GET v1/overrides, which pages with a token), filtered by a key prefix. A policy may hold
// hundreds of thousands: the page never asks for more than one page. Admin only, as the route is.
import { h, scrollTable, num, limitsWords, localTime, relative, errorText, fillPolicySelect, loadPolicies, markRendered } from '../lib.js';

export const title = 'Overrides';

const PAGE = 100;

export function mount(root, ctx) {
  const rendered = markRendered('overrides');
  if (ctx.scope !== 'admin') {
    root.append(h('p', { id: 'overrides-denied' },
      'Overrides name customers and their deals, so the server shows them to admin tokens only, and this token is read-only. ',
      'Sign in with an admin token to list them. The inspector still tells, for one key, whether an override applies.'));
    rendered();
    return () => {};
  }

  const policySel = h('select', { id: 'overrides-policy' });
  const prefixIn = h('input', { id: 'overrides-prefix', type: 'search', autocomplete: 'off', spellcheck: 'false', placeholder: 'key prefix' });
  const form = h('form', { id: 'overrides-form', class: 'row' },
    h('div', { class: 'field' }, h('label', { for: 'overrides-policy' }, 'Policy'), policySel),
    h('div', { class: 'field' }, h('label', { for: 'overrides-prefix' }, 'Keys starting with'), prefixIn),
    h('button', { type: 'submit' }, 'Filter'));
  const status = h('p', { id: 'overrides-status', role: 'status' });
  const list = h('div', { id: 'overrides-list' });
  const prev = h('button', { type: 'button', id: 'overrides-prev', disabled: true }, 'Previous page');
  const next = h('button', { type: 'button', id: 'overrides-next', disabled: true }, 'Next page');
  const where = h('span', { class: 'muted' });
  root.append(form, status, list, h('div', { class: 'pager' }, prev, next, where));

  let alive = true;
  let seq = 0;
  let tokens = ['']; // the pageToken of each page seen so far; the last is the current page's
  let nextToken = '';

  async function load() {
    const mine = ++seq;
    const q = new URLSearchParams({ policy: policySel.value, limit: String(PAGE) });
    if (prefixIn.value) q.set('prefix', prefixIn.value);
    if (tokens[tokens.length - 1]) q.set('pageToken', tokens[tokens.length - 1]);
    list.setAttribute('aria-busy', 'true');
    try {
      const res = await ctx.api(`v1/overrides?${q}`);
      if (!alive || mine !== seq) return;
      nextToken = res.nextPageToken || '';
      draw(res.overrides || []);
      status.textContent = '';
    } catch (e) {
      if (!alive || mine !== seq) return;
      status.textContent = errorText(e);
      list.replaceChildren();
    }
    list.removeAttribute('aria-busy');
    prev.disabled = tokens.length < 2;
    next.disabled = !nextToken;
    rendered();
  }

  function draw(page) {
    const first = (tokens.length - 1) * PAGE;
    where.textContent = page.length ? `overrides ${num(first + 1)} to ${num(first + page.length)}${nextToken ? ', more after' : ''}` : '';
    if (!page.length) {
      list.replaceChildren(h('p', {}, tokens.length > 1 ? 'No more overrides.' : `No override under ${policySel.value}${prefixIn.value ? ` with a key starting with “${prefixIn.value}”` : ''}.`));
      return;
    }
    const rows = page.map((o) => h('tr', { dataset: { key: o.key } },
      h('th', { scope: 'row', class: 'key mono', title: o.key }, o.key),
      h('td', {}, o.plan ? `plan ${o.plan}` : limitsWords(o.limits)),
      h('td', {}, o.expiresAt ? [localTime(o.expiresAt), ' (', relative(o.expiresAt), ')'] : 'never'),
      h('td', { class: 'reason' }, o.reason || '–'),
      h('td', {}, localTime(o.updatedAt)),
      h('td', {}, h('a', { href: `#/inspect?policy=${encodeURIComponent(o.policy || policySel.value)}&key=${encodeURIComponent(o.key)}`, 'aria-label': `Inspect ${o.key}` }, 'Inspect'))));
    const table = h('table', { id: 'overrides' },
      h('caption', { class: 'muted' }, `Overrides of ${policySel.value}, in key order`),
      h('thead', {}, h('tr', {},
        h('th', { scope: 'col' }, 'Key'),
        h('th', { scope: 'col' }, 'Plan or limits'),
        h('th', { scope: 'col' }, 'Expires'),
        h('th', { scope: 'col' }, 'Reason'),
        h('th', { scope: 'col' }, 'Set'),
        h('th', { scope: 'col' }, h('span', { class: 'muted' }, 'Action')))),
      h('tbody', {}, rows));
    list.replaceChildren(scrollTable(table));
  }

  const restart = () => { tokens = ['']; load(); };
  form.addEventListener('submit', (e) => { e.preventDefault(); restart(); });
  policySel.addEventListener('change', restart);
  next.addEventListener('click', () => { if (nextToken) { tokens.push(nextToken); load(); } });
  prev.addEventListener('click', () => { if (tokens.length > 1) { tokens.pop(); load(); } });

  loadPolicies(ctx).then((res) => {
    if (!alive) return;
    const pols = res.policies || [];
    const names = pols.map((p) => p.name).sort();
    // Start on the policy asked for, else the first that has overrides.
    const want = ctx.params.get('policy') || (pols.find((p) => p.overrides > 0) || {}).name || names[0];
    fillPolicySelect(policySel, names, want);
    if (ctx.params.get('prefix')) prefixIn.value = ctx.params.get('prefix');
    if (names.length) load();
    else { status.textContent = 'This server has no policies.'; rendered(); }
  }).catch((e) => { if (alive) { status.textContent = errorText(e); rendered(); } });

  return () => { alive = false; };
}
