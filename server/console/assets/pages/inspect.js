// Key inspector: one key of one policy as the limiter sees it now (peek: consumes nothing), when
// it refills (forecast), what applies to it (override or plan), and, for an admin token, the
// actions an operator takes: reset, refund, set or remove an override, each confirmed with a reason.
import { h, num, limitsWords, localTime, relative, duration, parseDuration, errorText, fillPolicySelect, loadPolicies, markRendered } from '../lib.js';

export const title = 'Inspect a key';

export function mount(root, ctx) {
  const rendered = markRendered('inspect');
  const admin = ctx.scope === 'admin';
  const policySel = h('select', { id: 'inspect-policy', required: true });
  const keyIn = h('input', { id: 'inspect-key', type: 'text', required: true, autocomplete: 'off', spellcheck: 'false', value: ctx.params.get('key') || '' });
  const form = h('form', { id: 'inspect-form', class: 'row' },
    h('div', { class: 'field' }, h('label', { for: 'inspect-policy' }, 'Policy'), policySel),
    h('div', { class: 'field' }, h('label', { for: 'inspect-key' }, 'Key'), keyIn),
    h('button', { type: 'submit', class: 'primary' }, 'Inspect'));
  const status = h('p', { id: 'inspect-status', class: 'status', role: 'status' });
  const result = h('div', { id: 'inspect-result' });
  root.append(form, status, result);

  let alive = true;
  let policies = new Map(); // name → the policy of v1/console/policies
  let seq = 0;

  // Relative times ("in 12 s") count down between inspections.
  const clock = setInterval(() => {
    for (const el of result.querySelectorAll('[data-at]')) el.textContent = relative(+el.dataset.at);
  }, 1000);

  const at = (ms, nowWords) => (ms && ms > Date.now() + 500
    ? [localTime(ms), ' (', h('span', { 'data-at': ms }, relative(ms)), ')']
    : [nowWords]);
  const field = (name, label, ...value) => [h('dt', {}, label), h('dd', { 'data-field': name }, ...value)];

  async function inspect(policy, key) {
    const mine = ++seq;
    result.setAttribute('aria-busy', 'true');
    const body = { policy, key };
    const path = `v1/overrides/${encodeURIComponent(policy)}/${encodeURIComponent(key)}`;
    const [peek, forecast, override] = await Promise.allSettled([
      ctx.api('v1/peek', { method: 'POST', body }),
      ctx.api('v1/forecast', { method: 'POST', body }),
      admin ? ctx.api(path) : Promise.reject(Object.assign(new Error('overrides need an admin token'), { status: 403 })),
    ]);
    if (!alive || mine !== seq) return;
    result.removeAttribute('aria-busy');
    const pol = policies.get(policy);
    result.replaceChildren(
      h('h2', {}, `${policy} / `, h('span', { class: 'mono' }, key)),
      h('div', { class: 'cards' },
        h('section', { class: 'card', 'aria-labelledby': 'insp-now' }, h('h3', { id: 'insp-now' }, 'Now'), peekView(peek)),
        h('section', { class: 'card', 'aria-labelledby': 'insp-fc' }, h('h3', { id: 'insp-fc' }, 'Refill'), forecastView(forecast)),
        h('section', { class: 'card', 'aria-labelledby': 'insp-ov' }, h('h3', { id: 'insp-ov' }, 'What applies'), overrideView(override, peek, pol))),
      admin ? actions(policy, key, pol, override.status === 'fulfilled' ? override.value : null)
        : h('p', { class: 'muted' }, 'Reset, refund and overrides need an admin token.'),
    );
    rendered();
  }

  function peekView(r) {
    if (r.status === 'rejected') return h('p', { class: 'error' }, errorText(r.reason));
    const d = r.value;
    const dl = h('dl', { class: 'fields' },
      field('allowed', 'A check now', d.allowed ? 'would be allowed' : 'would be denied', d.failOpen ? ' (fail-open: the store did not answer)' : ''),
      field('limit', 'Limit', num(d.limit)),
      field('remaining', 'Remaining', num(d.remaining)),
      field('resetAt', 'Resets', ...at(d.resetAt, 'now (full)')),
      field('retryAfterMs', 'Retry after', d.retryAfterMs > 0 ? duration(d.retryAfterMs) : '– (not denied)'),
    );
    if (d.parts && d.parts.length) {
      dl.append(...field('parts', 'Limits', h('ul', {}, d.parts.map((p, i) => h('li', {},
        `#${i + 1}${d.deniedBy === i ? ' (denies)' : ''}: ${num(p.remaining)} of ${num(p.limit)} left`)))));
    }
    return dl;
  }

  function forecastView(r) {
    if (r.status === 'rejected') return h('p', { class: 'error' }, errorText(r.reason));
    const f = r.value;
    return h('dl', { class: 'fields' },
      field('spendableNow', 'Checks that pass now', num(f.spendableNow)),
      field('nextReplenishAt', 'Next unit back', ...at(f.nextReplenishAt, f.fullAt > Date.now() + 500 ? 'within a second' : 'now (full)')),
      field('fullAt', 'Full again', ...at(f.fullAt, 'already full')));
  }

  function overrideView(r, peek, pol) {
    const planNow = peek.status === 'fulfilled' ? peek.value.plan : '';
    const policyWords = pol ? (pol.plan ? `the policy's default plan, ${pol.plan}, applies` : `the policy's limits apply (${limitsWords(pol.limits)})`) : 'the policy\'s limits apply';
    if (r.status === 'fulfilled') {
      const o = r.value;
      return h('div', {},
        h('p', {}, 'An override applies to this key.'),
        h('dl', { class: 'fields' },
          o.plan ? field('override-plan', 'Plan', o.plan) : field('override-limits', 'Limits', limitsWords(o.limits)),
          field('override-expiresAt', 'Expires', ...(o.expiresAt ? at(o.expiresAt, localTime(o.expiresAt)) : ['never'])),
          field('override-reason', 'Reason', o.reason || '–'),
          field('override-updatedAt', 'Set', localTime(o.updatedAt), ' (', h('span', { 'data-at': o.updatedAt }, relative(o.updatedAt)), ')')));
    }
    if (r.reason.status === 404) return h('p', { 'data-field': 'applies' }, `No override: ${policyWords}.`);
    if (r.reason.status === 403) {
      const over = peek.status === 'fulfilled' && peek.value.override;
      return h('p', { 'data-field': 'applies' },
        over ? `An override applies${planNow ? ` (plan ${planNow})` : ' (limits of its own)'}; its details need an admin token.`
          : `No override: ${planNow ? `plan ${planNow} applies` : policyWords}.`);
    }
    return h('p', { class: 'error' }, errorText(r.reason));
  }

  // ---- admin actions -----------------------------------------------------------------------
  function actions(policy, key, pol, current) {
    const plans = (pol && pol.plans) || [];
    const planSel = h('select', { id: 'override-plan' },
      plans.map((p) => h('option', { value: p }, p)),
      h('option', { value: '' }, 'limits of its own'));
    if (current) planSel.value = current.plan || '';
    const limitsIn = h('textarea', { id: 'override-limits', rows: 3, class: 'mono', spellcheck: 'false' });
    limitsIn.value = JSON.stringify((current && current.limits) || (pol && pol.limits) || []);
    const limitsRow = h('div', { class: 'field' }, h('label', { for: 'override-limits' }, 'Limits (JSON, as in docs/overrides.md)'), limitsIn);
    const showLimits = () => { limitsRow.hidden = planSel.value !== ''; };
    planSel.addEventListener('change', showLimits);
    showLimits();
    const ttlIn = h('input', { id: 'override-ttl', type: 'text', placeholder: 'e.g. 1h, 30m, 7d', autocomplete: 'off', size: 12 });
    const costIn = h('input', { id: 'refund-cost', type: 'number', min: 1, step: 1, value: '1', inputmode: 'numeric' });

    // act runs one action: confirm with a reason, call, report in #inspect-status, look again.
    async function act(what, confirmText, call) {
      const ok = await ctx.confirm({ title: what, body: confirmText, needReason: true, okText: what });
      if (!ok || !alive) return;
      status.className = 'status';
      status.textContent = `${what}…`;
      try {
        await call(ok.reason);
        status.className = 'status ok';
        status.textContent = `Done: ${what.toLowerCase()} of ${policy} / ${key}.`;
      } catch (e) {
        status.className = 'status error';
        status.textContent = `${what} failed. ${errorText(e)}`;
      }
      if (alive) inspect(policy, key);
    }
    const keyPath = `v1/overrides/${encodeURIComponent(policy)}/${encodeURIComponent(key)}`;

    const reset = h('button', { type: 'button', id: 'action-reset', class: 'danger' }, 'Reset key');
    reset.addEventListener('click', () => act('Reset key', `Reset ${key} under ${policy}? Its state is deleted: it gets its full limit back at once.`,
      (reason) => ctx.api('v1/reset', { method: 'POST', body: { policy, key, reason } })));

    const refund = h('button', { type: 'button', id: 'action-refund' }, 'Refund');
    refund.addEventListener('click', () => {
      const cost = Number(costIn.value);
      if (!Number.isInteger(cost) || cost < 1) { status.className = 'status error'; status.textContent = 'The cost to refund must be a whole number from 1.'; costIn.focus(); return; }
      act('Refund', `Give ${num(cost)} back to ${key} under ${policy}?`,
        (reason) => ctx.api('v1/refund', { method: 'POST', body: { policy, key, cost, reason } }));
    });

    const set = h('button', { type: 'button', id: 'action-override-set' }, 'Set override');
    set.addEventListener('click', () => {
      const body = {};
      if (planSel.value) body.plan = planSel.value;
      else {
        try { body.limits = JSON.parse(limitsIn.value); } catch (e) { status.className = 'status error'; status.textContent = `The limits are not valid JSON: ${e.message}`; limitsIn.focus(); return; }
      }
      if (ttlIn.value.trim()) {
        const ttl = parseDuration(ttlIn.value);
        if (!(ttl > 0)) { status.className = 'status error'; status.textContent = 'The duration reads like 90s, 30m, 2h or 7d.'; ttlIn.focus(); return; }
        body.ttlMs = ttl;
      }
      const what = body.plan ? `plan ${body.plan}` : `limits ${limitsWords(body.limits)}`;
      act('Set override', `Give ${key} under ${policy} ${what}${body.ttlMs ? ` for ${duration(body.ttlMs)}` : ' until removed'}? It replaces any override the key has.`,
        (reason) => ctx.api(keyPath, { method: 'PUT', body: { ...body, ...(reason ? { reason } : {}) } }));
    });

    const del = h('button', { type: 'button', id: 'action-override-delete', class: 'danger', disabled: !current }, 'Remove override');
    del.addEventListener('click', () => act('Remove override', `Remove the override of ${key} under ${policy}? The key gets the policy's default back.`,
      // A DELETE has no body: the reason goes in the query, and the server logs it.
      (reason) => ctx.api(`${keyPath}?reason=${encodeURIComponent(reason || '')}`, { method: 'DELETE' })));

    return h('section', { 'aria-labelledby': 'insp-actions' },
      h('h2', { id: 'insp-actions' }, 'Actions'),
      h('div', { class: 'row' },
        reset,
        h('div', { class: 'field' }, h('label', { for: 'refund-cost' }, 'Cost to refund'), costIn),
        refund),
      h('fieldset', {},
        h('legend', {}, current ? 'Change the override' : 'Set an override'),
        h('div', { class: 'row' },
          h('div', { class: 'field' }, h('label', { for: 'override-plan' }, 'Plan'), planSel),
          h('div', { class: 'field' }, h('label', { for: 'override-ttl' }, 'Lasts for (empty: until removed)'), ttlIn)),
        limitsRow,
        h('div', { class: 'row' }, set, del)));
  }

  // ---- wiring --------------------------------------------------------------------------------
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const policy = policySel.value, key = keyIn.value;
    if (!policy || !key) return;
    // Keep the address shareable without remounting the page (replaceState fires no hashchange).
    history.replaceState(null, '', `#/inspect?policy=${encodeURIComponent(policy)}&key=${encodeURIComponent(key)}`);
    status.textContent = '';
    inspect(policy, key);
  });

  loadPolicies(ctx).then((res) => {
    if (!alive) return;
    policies = new Map((res.policies || []).map((p) => [p.name, p]));
    const names = [...policies.keys()].sort();
    const want = ctx.params.get('policy');
    if (want && !policies.has(want)) names.push(want); // let the server say what is wrong with it
    fillPolicySelect(policySel, names, want || undefined);
    if (want && keyIn.value) inspect(want, keyIn.value);
    else rendered();
  }).catch((e) => { if (alive) { status.className = 'status error'; status.textContent = errorText(e); rendered(); } });

  return () => { alive = false; clearInterval(clock); };
}
