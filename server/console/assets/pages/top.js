// Top keys: who is checked most and who is denied most, per policy, over the last minute or hour
// (GET v1/console/top). A query, refreshed every 5 s while the tab is visible. Keys are user data:
// they reach the page only through textContent and encodeURIComponent.
import { h, scrollTable, num, pct, errorText, fillPolicySelect, loadPolicies, markRendered } from '../lib.js';

export const title = 'Top keys';

const REFRESH_MS = 5000;

export function mount(root, ctx) {
  const rendered = markRendered('top');
  const win = h('select', { id: 'top-window' },
    h('option', { value: '1m' }, 'last minute'), h('option', { value: '1h' }, 'last hour'));
  win.value = ctx.params.get('window') === '1h' ? '1h' : '1m';
  const policy = h('select', { id: 'top-policy' }, h('option', { value: '' }, 'All policies'));
  const status = h('p', { id: 'top-status', role: 'status' }); // errors only: no announcement every 5 s
  const updated = h('p', { class: 'muted' });
  const results = h('div', { id: 'top-results' });
  root.append(
    h('div', { class: 'row' },
      h('div', { class: 'field' }, h('label', { for: 'top-window' }, 'Window'), win),
      h('div', { class: 'field' }, h('label', { for: 'top-policy' }, 'Policy'), policy)),
    status, updated, results);

  let want = ctx.params.get('policy') || ''; // the filter asked for, until the select holds it
  let alive = true;
  let timer = 0;
  let seq = 0;

  loadPolicies(ctx).then((res) => {
    if (!alive) return;
    fillPolicySelect(policy, (res.policies || []).map((p) => p.name).sort(), want, 'All policies');
  }).catch(() => { /* the filter stays at "All policies"; refresh() reports errors */ });

  async function refresh() {
    clearTimeout(timer);
    const mine = ++seq;
    if (policy.options.length > 1) want = policy.value;
    // Across every policy (100 on a big server) 5 keys each keep the page readable and quick to
    // redraw every 5 s; one policy shows 20.
    const q = new URLSearchParams({ window: win.value, limit: want ? '20' : '5' });
    if (want) q.set('policy', want);
    try {
      const res = await ctx.api(`v1/console/top?${q}`);
      if (!alive || mine !== seq) return;
      draw(res);
      updated.textContent = `Updated ${new Date().toLocaleTimeString()}; refreshes every 5 s.`;
      status.textContent = '';
      status.classList.remove('error');
      rendered();
    } catch (e) {
      if (!alive || mine !== seq) return;
      status.classList.add('error');
      status.textContent = e.status === 501
        ? 'Top keys are off on this server (console.topKeys: false in its config).'
        : errorText(e);
      if (e.status === 501 || e.status === 404) results.replaceChildren();
      rendered();
    }
    if (alive && !document.hidden) timer = setTimeout(refresh, REFRESH_MS);
  }

  function draw(res) {
    // Keep keyboard focus on the same link across a refresh, which replaces the rows.
    const a = document.activeElement;
    const focus = results.contains(a) && a.dataset.focusId;
    const windowWords = res.window === '1h' ? 'the last hour' : 'the last minute';
    const sections = (res.policies || []).map((p) => h('section', { class: 'policy-top', dataset: { policy: p.policy }, 'aria-label': `Top keys of ${p.policy}` },
      h('h2', {}, p.policy),
      h('p', { class: 'muted' },
        `${num(p.checked.total)} checks and ${num(p.denied.total)} denials in ${windowWords}. `,
        p.checked.errorBound || p.denied.errorBound
          ? `The counts come from a sketch that follows ${num(res.capacity)} keys: a count is never too low, and too high by at most its ± error `
            + `(here at most ${num(p.checked.errorBound)} for checks, ${num(p.denied.errorBound)} for denials).`
          : `Every count is exact: the sketch, which follows ${num(res.capacity)} keys, has had room for them all.`),
      h('div', { class: 'tables' },
        topTable(p.policy, 'top-checked', 'Checked most', p.checked),
        topTable(p.policy, 'top-denied', 'Denied most', p.denied))));
    if (!sections.length) sections.push(h('p', {}, `No checks in ${windowWords}${want ? ` under ${want}` : ''}.`));
    if (res.dropped) {
      sections.unshift(h('p', { class: 'muted' }, `${num(res.dropped)} checks since the server started came faster than the sketch could take them, and are in no list.`));
    }
    results.replaceChildren(...sections);
    if (focus) {
      const again = [...results.querySelectorAll('a')].find((x) => x.dataset.focusId === focus);
      if (again) again.focus();
    }
  }

  function topTable(pol, cls, caption, side) {
    const rows = (side.keys || []).map((k) => {
      const href = `#/inspect?policy=${encodeURIComponent(pol)}&key=${encodeURIComponent(k.key)}`;
      return h('tr', { dataset: { key: k.key } },
        h('th', { scope: 'row', class: 'key mono', title: k.key }, k.key),
        h('td', { class: 'num' }, num(k.count)),
        h('td', { class: 'num' }, k.error ? `± ${num(k.error)}` : 'exact'),
        h('td', { class: 'num' }, pct(k.count, side.total)),
        h('td', {}, h('a', { href, dataset: { focusId: `${cls}\n${pol}\n${k.key}` }, 'aria-label': `Inspect ${k.key}` }, 'Inspect')));
    });
    const table = h('table', { class: cls },
      h('caption', {}, caption),
      h('thead', {}, h('tr', {},
        h('th', { scope: 'col' }, 'Key'),
        h('th', { scope: 'col', class: 'num' }, 'Count'),
        h('th', { scope: 'col', class: 'num' }, '± error'),
        h('th', { scope: 'col', class: 'num' }, 'Share'),
        h('th', { scope: 'col' }, h('span', { class: 'muted' }, 'Action')))),
      h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'none'))));
    return scrollTable(table);
  }

  const onVisible = () => { if (!document.hidden) refresh(); else clearTimeout(timer); };
  document.addEventListener('visibilitychange', onVisible);
  win.addEventListener('change', refresh);
  policy.addEventListener('change', refresh);
  refresh();

  return () => {
    alive = false;
    clearTimeout(timer);
    document.removeEventListener('visibilitychange', onVisible);
  };
}
