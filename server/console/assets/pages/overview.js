// Overview: is the service healthy, what does it admit and deny across every policy, live, and
// which policy denies most. Everything moving here comes from the shell's live feed (ctx.history
// and ctx.onTick); the policies' list is fetched once, and again after a reload.
import { h, scrollTable, num, num2, limitsWords, sparkline, loadPolicies, errorText, markRendered } from '../lib.js';

export const title = 'Overview';

const LAST_MINUTE = 60;

export function mount(root, ctx) {
  const rendered = markRendered('overview');
  const health = h('div', { id: 'health', 'data-state': 'ok' }, h('span', { class: 'verdict' }, 'Waiting for the live feed…'));
  const chartEl = h('div', { id: 'overview-chart', class: 'chart', role: 'img', 'aria-label': 'Allowed and denied checks per second across all policies, last 15 minutes' });
  chartEl.dataset.updates = '0';
  chartEl.dataset.allowedTotal = '0';
  const totals = h('p', { class: 'legend-note' },
    h('span', {}, h('span', { class: 'swatch allowed' }), 'allowed/s'),
    h('span', {}, h('span', { class: 'swatch denied' }), 'denied/s'),
    h('span', { class: 'muted', id: 'overview-totals' }));
  const tableStatus = h('p', { role: 'status' });
  const tableBox = h('div');
  root.append(
    health,
    h('h2', {}, 'Checks per second, all policies, last 15 minutes'),
    totals, chartEl,
    h('h2', {}, 'Policies'), tableStatus, tableBox,
  );

  let alive = true;
  let policies = []; // of v1/console/policies
  let storeInfo = null; // {kind, ready, error} of v1/console/policies
  let rows = new Map(); // policy name → {tr, allowed, denied, canvas}
  let sortBy = 'name';
  fetchPolicies(); // first: the request is under way while the chart is built

  // ---- the chart, fed by the feed ---------------------------------------------------------
  let updates = 0;
  const u = ctx.chart(chartEl, {
    height: 260,
    legend: { show: false },
    cursor: { drag: { x: false, y: false } },
    series: [{}, { label: 'allowed/s', stroke: '--allowed', width: 1.5, points: { show: false } },
      { label: 'denied/s', stroke: '--denied', width: 1.5, points: { show: false } }],
    axes: [{}, { size: 56 }],
  }, [[], [], []]);

  function drawChart(hist) {
    const n = hist.store.calls.length;
    const xs = new Array(n), allowed = new Array(n).fill(0), denied = new Array(n).fill(0);
    for (let i = 0; i < n; i++) xs[i] = (hist.start + i * hist.stepMs) / 1000;
    let allowedTotal = 0, deniedTotal = 0;
    for (const p of Object.values(hist.policies)) {
      for (let i = 0; i < n; i++) { allowed[i] += p.allowed[i]; denied[i] += p.denied[i]; }
    }
    for (let i = 0; i < n; i++) { allowedTotal += allowed[i]; deniedTotal += denied[i]; }
    u.setData([xs, allowed, denied]);
    chartEl.dataset.allowedTotal = String(allowedTotal);
    root.querySelector('#overview-totals').textContent = `15 min: ${num(allowedTotal)} allowed, ${num(deniedTotal)} denied`;
  }

  // ---- the health strip --------------------------------------------------------------------

  function sumLast(arr, n) { let s = 0; for (let i = Math.max(0, arr.length - n); i < arr.length; i++) s += arr[i]; return s; }

  function drawHealth(hist) {
    const s = hist.store;
    let failOpen = 0, failClosed = 0, checkErrors = 0;
    for (const p of Object.values(hist.policies)) {
      failOpen += sumLast(p.failOpen, LAST_MINUTE);
      failClosed += sumLast(p.failClosed, LAST_MINUTE);
      checkErrors += sumLast(p.errors, LAST_MINUTE);
    }
    const storeErrors = sumLast(s.errors, LAST_MINUTE), timeouts = sumLast(s.timeouts, LAST_MINUTE);
    const ready = hist.ready && (!storeInfo || storeInfo.ready || updates > 0);
    const why = [];
    let state = 'ok';
    if (!ready) {
      state = 'down';
      why.push(`not ready${hist.readyError || (storeInfo && storeInfo.error) ? `: ${hist.readyError || storeInfo.error}` : ''}`);
    } else {
      if (failOpen) why.push(`${num(failOpen)} checks allowed by fail-open`);
      if (failClosed) why.push(`${num(failClosed)} checks refused by fail-closed`);
      if (storeErrors) why.push(`${num(storeErrors)} store errors`);
      if (timeouts) why.push(`${num(timeouts)} store timeouts`);
      if (checkErrors) why.push(`${num(checkErrors)} failed checks`);
      if (why.length) { state = 'degraded'; why[why.length - 1] += ' in the last minute'; }
    }
    const verdict = { ok: 'Healthy', degraded: 'Degraded', down: 'Down' }[state];
    const last = s.calls.length - 1;
    health.dataset.state = state;
    health.replaceChildren(
      h('span', { class: 'verdict' }, why.length ? `${verdict}: ${why.join(', ')}` : `${verdict}: ready, no store errors or fail-mode decisions in the last minute`),
      // The quantiles are of the last second's store calls: none (the embedded store, or no
      // traffic) has none to show.
      h('span', { class: 'stat' }, `store${storeInfo ? ` (${storeInfo.kind})` : ''} p50 `,
        h('b', {}, s.calls[last] ? `${num2(s.p50Ms[last])} ms` : '–'), ', p99 ', h('b', {}, s.calls[last] ? `${num2(s.p99Ms[last])} ms` : '–')),
      h('span', { class: 'stat' }, 'store errors (1 min) ', h('b', {}, num(storeErrors)), ', timeouts ', h('b', {}, num(timeouts))),
      h('span', { class: 'stat' }, 'reloads (15 min) ', h('b', {}, num(sumLast(hist.reloads.ok, 900))), ' ok, ', h('b', {}, num(sumLast(hist.reloads.error, 900))), ' failed'),
    );
  }

  // ---- the policies' table -----------------------------------------------------------------

  function buildTable() {
    const sortButton = (key, label) => h('button', { type: 'button', class: 'sort', onclick: () => { sortBy = key; buildTable(); const hi = ctx.history(); if (hi) drawRows(hi); } }, label);
    const th = (key, label, cls) => h('th', { scope: 'col', class: cls, 'aria-sort': sortBy === key ? (key === 'name' ? 'ascending' : 'descending') : null }, sortButton(key, label));
    const table = h('table', { id: 'policies' },
      h('caption', { class: 'muted' }, `${policies.length} policies; rates are the last second`),
      h('thead', {}, h('tr', {},
        th('name', 'Policy'),
        h('th', { scope: 'col' }, 'Limits'),
        h('th', { scope: 'col' }, 'Fail mode'),
        h('th', { scope: 'col' }, 'Plans'),
        h('th', { scope: 'col', class: 'num' }, 'Overrides'),
        h('th', { scope: 'col', class: 'num' }, 'Allowed/s'),
        th('denied', 'Denied/s', 'num'),
        h('th', { scope: 'col' }, 'Last 15 min'))));
    const tbody = h('tbody');
    rows = new Map();
    const hist = ctx.history();
    const lastOf = (name, series) => {
      const p = hist && hist.policies[name];
      return p ? p[series][p[series].length - 1] : 0;
    };
    const sorted = policies.slice();
    if (sortBy === 'denied') sorted.sort((a, b) => lastOf(b.name, 'denied') - lastOf(a.name, 'denied') || a.name.localeCompare(b.name));
    else sorted.sort((a, b) => a.name.localeCompare(b.name));
    for (const p of sorted) {
      const allowed = h('td', { class: 'num allowed' }, '–');
      const denied = h('td', { class: 'num denied' }, '–');
      const canvas = h('canvas', { class: 'spark', width: 140, height: 28, role: 'img', 'aria-label': `${p.name}: allowed and denied per second, last 15 minutes` });
      const plans = p.plans && p.plans.length ? p.plans.map((x) => (x === p.plan ? `${x} (default)` : x)).join(', ') : '–';
      const tr = h('tr', { dataset: { policy: p.name } },
        h('th', { scope: 'row' }, h('a', { href: `#/top?policy=${encodeURIComponent(p.name)}` }, p.name)),
        h('td', {}, limitsWords(p.limits)),
        h('td', {}, p.failMode || '–'),
        h('td', {}, plans),
        h('td', { class: 'num' }, p.overrides ? h('a', { href: `#/overrides?policy=${encodeURIComponent(p.name)}`, 'aria-label': `${num(p.overrides)} overrides of ${p.name}` }, num(p.overrides)) : '0'),
        allowed, denied, h('td', {}, canvas));
      tbody.append(tr);
      rows.set(p.name, { tr, allowed, denied, canvas });
    }
    table.append(tbody);
    const hadFocus = tableBox.contains(document.activeElement) && document.activeElement.classList.contains('sort');
    tableBox.replaceChildren(scrollTable(table));
    if (hadFocus) table.querySelector('th[aria-sort] button').focus();
  }

  function drawRows(hist) {
    const colors = { allowed: ctx.cssVar('--allowed'), denied: ctx.cssVar('--denied') };
    for (const [name, r] of rows) {
      const p = hist.policies[name];
      if (!p) { r.allowed.textContent = '0'; r.denied.textContent = '0'; sparkline(r.canvas, [], [], colors); continue; }
      r.allowed.textContent = num(p.allowed[p.allowed.length - 1]);
      r.denied.textContent = num(p.denied[p.denied.length - 1]);
      sparkline(r.canvas, p.allowed, p.denied, colors);
    }
  }

  async function fetchPolicies() {
    try {
      const res = await loadPolicies(ctx);
      if (!alive) return;
      policies = res.policies || [];
      storeInfo = res.store || null;
      tableStatus.textContent = '';
      buildTable();
      rendered(); // the table's text is the first data; sparklines and health follow
      const hist = ctx.history();
      if (hist) { drawRows(hist); drawHealth(hist); }
    } catch (e) {
      if (alive) tableStatus.textContent = errorText(e);
    }
  }

  // ---- wiring ------------------------------------------------------------------------------
  function all(hist) { drawChart(hist); drawHealth(hist); drawRows(hist); }
  const hist0 = ctx.history();
  if (hist0) all(hist0);
  const offHistory = ctx.onHistory(all);
  const offTick = ctx.onTick((tick) => {
    const hist = ctx.history();
    updates++;
    chartEl.dataset.updates = String(updates);
    all(hist);
    if (tick.reloads && tick.reloads.ok > 0) fetchPolicies(); // a reload may have changed them
  });
  const repaint = () => { const hist = ctx.history(); if (hist) drawRows(hist); };
  window.addEventListener('sluice:theme', repaint);

  return () => {
    alive = false;
    offTick(); offHistory();
    window.removeEventListener('sluice:theme', repaint);
    u.destroy();
  };
}
