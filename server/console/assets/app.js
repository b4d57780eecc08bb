// The console's shell: sign-in, navigation, the live feed, the theme, and the ctx every page gets.
//
// A page is a module under pages/ (pages/NAME.js, shown at #/NAME) that exports
//
//   export const title = 'Regions';
//   export function mount(root, ctx) { …; return unmount; }
//
// mount draws into root (an empty <div> inside <main>) and returns a function that undoes what it
// started (timers, ctx.onTick subscriptions, charts). Once its first data is on screen, a page
// calls performance.mark('sluice:rendered:NAME'). ctx holds:
//
//   ctx.api(path, {method, body})  Promise of the parsed JSON answer. path is relative to the API
//                                  root, e.g. 'v1/console/top?window=1m' (no leading slash, so
//                                  the console works behind a path prefix). Sends the token as
//                                  Authorization: Bearer, and body (any value) as JSON. On a
//                                  non-2xx answer it throws an Error with .status, .code and
//                                  .message (the server's "error"); on 401 the shell also shows
//                                  the sign-in form. A network failure throws with .status 0.
//   ctx.scope                      'check' or 'admin': what the token may do (admin without tokens).
//   ctx.params                     URLSearchParams of the hash's query (#/inspect?policy=a&key=b).
//   ctx.navigate(hash)             go to another page, e.g. ctx.navigate('#/inspect?policy=a').
//   ctx.onTick(fn)                 → unsubscribe. fn(tick) for every live tick (docs/console.md),
//                                  after ctx.history() includes it.
//   ctx.onHistory(fn)              → unsubscribe. fn(history) when a (re)connection brings a new
//                                  history, which replaces the buffer (ticks may have been missed).
//   ctx.history()                  the last 15 minutes: the latest `history` event with every tick
//                                  since appended, in the same shape ({start, stepMs, policies:
//                                  {NAME: {allowed, denied, failOpen, failClosed, errors}}, store:
//                                  {p50Ms, p99Ms, calls, errors, timeouts}, reloads: {ok, error}},
//                                  arrays of equal length, element i the second at start+i*stepMs),
//                                  plus ready and readyError of the last tick. null until the
//                                  first history arrives. Shared: read it, never modify it.
//   ctx.chart(el, opts, data)      a uPlot instance in el, sized to el's width (and opts.height,
//                                  default 240) and resized with it, its axes and grid in the
//                                  theme's colors. A series' stroke may be a CSS custom property
//                                  name ('--denied'): it is read at each draw, so the theme's
//                                  toggle recolors it. Call .destroy() in unmount.
//   ctx.cssVar(name)               the current value of a custom property ('--c1').
//   ctx.confirm({title, body, needReason})
//                                  Promise of {reason} when confirmed, null when cancelled: a modal
//                                  dialog whose reason is required when needReason is true.
//
// The global uPlot (vendor/uplot) is also there for pages that want it directly, and lib.js has
// the helpers the pages share (h to build elements, number, duration, time and limit formats).

const PAGES = ['overview', 'top', 'inspect', 'overrides', 'regions'];
const TOKEN_KEY = 'sluice.token';
const SESSION_KEY = 'sluice.session'; // the last session's {auth, scope}: no secret
const THEME_KEY = 'sluice.theme';
const WINDOW_SECONDS = 900; // the history the shell keeps, as the server's history event spans

const $ = (sel) => document.querySelector(sel);
const apiRoot = new URL('../', location.href); // /prefix/ui/ → /prefix/

let token = sessionStorage.getItem(TOKEN_KEY) || '';
let scope = 'check';
let auth = true;

// ---- the API -----------------------------------------------------------------------------

async function api(path, { method = 'GET', body } = {}) {
  const headers = {};
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(new URL(path, apiRoot), {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store', credentials: 'omit',
    });
  } catch (e) {
    throw Object.assign(new Error(`cannot reach the server (${e.message})`), { status: 0, code: 'network' });
  }
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON: a proxy's page */ }
  if (!res.ok) {
    const err = new Error((data && data.error) || `${res.status} ${res.statusText}`);
    err.status = res.status;
    err.code = (data && data.code) || '';
    if (res.status === 401) signedOut(token ? 'The server refused the token: sign in again.' : '');
    throw err;
  }
  return data;
}

// ---- sign-in -----------------------------------------------------------------------------

function setStatus(text) { $('#shell-status').textContent = text; }

async function start() {
  // Load the page's module while the session is asked: the two round trips overlap.
  import(`./pages/${parseHash().name || 'overview'}.js`).catch(() => {}); // route() reports failures
  // A reload of a signed-in tab shows the page at once with the session it had (kept beside the
  // token), and asks the server meanwhile: a page's first data then waits for one round trip, not
  // two. Should the answer differ (a token file reloaded since), the page is shown again; a 401
  // signs out. The scope only shapes the pages: the server checks every request.
  let cached = null;
  try { cached = JSON.parse(sessionStorage.getItem(SESSION_KEY)); } catch { /* none */ }
  if (cached && (token || !cached.auth)) signedIn(cached);
  let session;
  try {
    session = await api('v1/console/session');
  } catch (e) {
    if (e.status === 401) return; // api() showed the form
    if (cached) return; // the page is up; its own requests report the trouble
    setStatus(`The console cannot start: ${e.message}`);
    setTimeout(start, 5000);
    return;
  }
  sessionStorage.setItem(SESSION_KEY, JSON.stringify({ auth: session.auth, scope: session.scope }));
  if (!cached || cached.auth !== session.auth || cached.scope !== session.scope) signedIn(session);
}

// signedIn shows the header and the page for a session, then connects the live feed.
async function signedIn(session) {
  auth = session.auth;
  scope = session.scope === 'admin' ? 'admin' : 'check';
  $('#login').hidden = true;
  $('#nav').hidden = false;
  $('#scope').hidden = false;
  $('#scope').textContent = scope === 'admin' ? 'admin' : 'read-only';
  $('#signout').hidden = !auth;
  $('#live').hidden = false;
  setStatus('');
  // The page first, then the feed: the feed's first event, the history (a megabyte or two with
  // 100 policies), would otherwise arrive and be parsed while the page waits for its own data.
  // It connects once the page has marked its first data on screen, or after a second and a half.
  const pageReady = new Promise((resolve) => {
    const obs = new PerformanceObserver((list) => {
      if (list.getEntries().some((e) => e.name.startsWith('sluice:rendered:'))) { obs.disconnect(); resolve(); }
    });
    obs.observe({ type: 'mark' });
    setTimeout(() => { obs.disconnect(); resolve(); }, 1500);
  });
  route();
  await pageReady;
  if (!$('#login').hidden) return; // signed out meanwhile
  feed.start();
}

// signedOut shows the sign-in form, with why.
function signedOut(message) {
  token = '';
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(SESSION_KEY);
  feed.stop();
  unmountPage();
  $('#page-title').textContent = 'Sign in';
  document.title = 'Sign in · sluice';
  $('#nav').hidden = true;
  $('#scope').hidden = true;
  $('#signout').hidden = true;
  $('#live').hidden = true; // no feed without a token: "down" would alarm for nothing
  $('#login').hidden = false;
  setStatus(message);
  $('#token').value = '';
  $('#token').focus();
}

$('#login').addEventListener('submit', (e) => {
  e.preventDefault();
  token = $('#token').value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  $('#token').value = '';
  setStatus('Signing in…');
  start();
});

$('#signout').addEventListener('click', () => signedOut('Signed out.'));

// ---- the live feed -------------------------------------------------------------------------

// feed reads /v1/console/events with fetch (EventSource cannot send the Authorization header)
// and keeps the last 15 minutes in buf, which ctx.history() hands out.
const feed = (() => {
  let buf = null;
  let controller = null;
  let retry = 0;
  let timer = 0;
  const tickFns = new Set();
  const historyFns = new Set();

  function setState(state) {
    const el = $('#live');
    el.dataset.state = state;
    el.textContent = { live: 'live', connecting: 'connecting…', down: 'feed down, retrying' }[state];
  }

  function zeros(n) { return new Array(n).fill(0); }

  function applyHistory(h) {
    const n = Math.max(0, ...Object.values(h.store || {}).map((a) => a.length),
      ...Object.values(h.policies || {}).flatMap((p) => Object.values(p).map((a) => a.length)));
    const fill = (obj, names) => {
      const out = {};
      for (const k of names) out[k] = obj && obj[k] ? obj[k].slice() : zeros(n);
      return out;
    };
    buf = {
      start: h.start, stepMs: h.stepMs || 1000, policies: {},
      store: fill(h.store, ['p50Ms', 'p99Ms', 'calls', 'errors', 'timeouts']),
      reloads: fill(h.reloads, ['ok', 'error']),
      ready: buf ? buf.ready : true, readyError: buf ? buf.readyError : '',
    };
    for (const [name, p] of Object.entries(h.policies || {})) buf.policies[name] = fill(p, POLICY_SERIES);
    for (const fn of historyFns) safely(fn, buf);
  }

  // applyTick writes the tick's second into buf: appended after a gap of zeros, or over the
  // slot it names, then trims buf to the window.
  function applyTick(t) {
    if (!buf) return;
    const all = [buf.store, buf.reloads, ...Object.values(buf.policies)];
    let i = Math.round((t.t - buf.start) / buf.stepMs);
    if (buf.store.calls.length === 0 || i >= buf.store.calls.length + WINDOW_SECONDS) {
      // An empty history (a server just started answers start 0), or a gap longer than the
      // window: the buffer starts afresh at this second.
      for (const group of all) for (const arr of Object.values(group)) arr.length = 0;
      buf.start = t.t;
      i = 0;
    }
    if (i < 0) return; // older than the window
    while (buf.store.calls.length <= i) { // pad up to slot i: usually one push
      for (const group of all) for (const arr of Object.values(group)) arr.push(0);
    }
    const write = (group, values) => { for (const k in group) group[k][i] = values && typeof values[k] === 'number' ? values[k] : 0; };
    write(buf.store, t.store);
    write(buf.reloads, t.reloads);
    for (const [name, p] of Object.entries(buf.policies)) write(p, t.policies && t.policies[name]);
    for (const [name, p] of Object.entries(t.policies || {})) {
      if (!buf.policies[name]) { // a policy new in this second
        buf.policies[name] = Object.fromEntries(POLICY_SERIES.map((k) => [k, zeros(buf.store.calls.length)]));
        write(buf.policies[name], p);
      }
    }
    const extra = buf.store.calls.length - WINDOW_SECONDS;
    if (extra > 0) {
      for (const group of [buf.store, buf.reloads, ...Object.values(buf.policies)]) for (const arr of Object.values(group)) arr.splice(0, extra);
      buf.start += extra * buf.stepMs;
    }
    buf.ready = t.ready !== false;
    buf.readyError = t.readyError || '';
    for (const fn of tickFns) safely(fn, t);
  }

  function dispatch(event, data) {
    let v;
    try { v = JSON.parse(data); } catch { return; }
    if (event === 'history') { applyHistory(v); setState('live'); retry = 0; }
    else if (event === 'tick') applyTick(v);
  }

  async function connect() {
    controller = new AbortController();
    const { signal } = controller;
    setState('connecting');
    try {
      const headers = { Accept: 'text/event-stream' };
      if (token) headers.Authorization = `Bearer ${token}`;
      const res = await fetch(new URL('v1/console/events', apiRoot), { headers, signal, cache: 'no-store', credentials: 'omit' });
      if (res.status === 401) { signedOut('The server refused the token: sign in again.'); return; }
      if (!res.ok || !res.body) throw new Error(`events: ${res.status}`);
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      // SSE: "field: value" lines; a blank line ends an event. Lines end in \n, \r\n or \r.
      let event = 'message', data = [];
      const line = (l) => {
        if (l === '') {
          if (data.length) dispatch(event, data.join('\n'));
          event = 'message'; data = [];
        } else if (!l.startsWith(':')) { // ":" starts a comment (keep-alive)
          const c = l.indexOf(':');
          const field = c < 0 ? l : l.slice(0, c);
          const val = c < 0 ? '' : l.slice(c + 1).replace(/^ /, '');
          if (field === 'event') event = val;
          else if (field === 'data') data.push(val);
        }
      };
      // Only each new chunk is scanned for line ends: the history, a megabyte or two on one
      // line, arrives in many chunks, and rescanning all of it at each would be quadratic.
      let pending = []; // the pieces of the unfinished line
      let skipLF = false; // the last chunk ended in \r: a \n opening this one belongs to it
      const eol = /\r\n?|\n/g;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        let i = skipLF && value[0] === '\n' ? 1 : 0;
        skipLF = false;
        eol.lastIndex = i;
        for (let m; (m = eol.exec(value));) {
          pending.push(value.slice(i, m.index));
          line(pending.join(''));
          pending = [];
          i = eol.lastIndex;
          if (m[0] === '\r' && i === value.length) skipLF = true;
        }
        if (i < value.length) pending.push(value.slice(i));
      }
      throw new Error('events: the server closed the feed');
    } catch (e) {
      if (signal.aborted) return;
      // Back off 1, 2, 4 … 30 s, with jitter so that a restarted server is not hit at once by all.
      retry++;
      setState(retry > 2 ? 'down' : 'connecting');
      const wait = Math.min(30000, 1000 * 2 ** (retry - 1)) * (0.75 + Math.random() / 2);
      timer = setTimeout(connect, wait);
    }
  }

  return {
    start() { if (!controller || controller.signal.aborted) { retry = 0; connect(); } },
    stop() { clearTimeout(timer); if (controller) controller.abort(); controller = null; buf = null; setState('down'); },
    history: () => buf,
    onTick(fn) { tickFns.add(fn); return () => tickFns.delete(fn); },
    onHistory(fn) { historyFns.add(fn); return () => historyFns.delete(fn); },
  };
})();

const POLICY_SERIES = ['allowed', 'denied', 'failOpen', 'failClosed', 'errors'];

// safely runs a page's callback so that one page's bug does not stop the feed.
function safely(fn, arg) {
  try { fn(arg); } catch (e) { console.error(e); }
}

// ---- theme and charts -----------------------------------------------------------------------

const dark = matchMedia('(prefers-color-scheme: dark)');
const charts = new Set();

// cssVar reads a custom property through a cache that applyTheme empties: charts ask for their
// colors at every draw, and getComputedStyle after a DOM change forces a style recalculation.
let themeCache = new Map();
function cssVar(name) {
  let v = themeCache.get(name);
  if (v === undefined) {
    v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    themeCache.set(name, v);
  }
  return v;
}
function isDark() { const t = document.documentElement.dataset.theme; return t ? t === 'dark' : dark.matches; }

function applyTheme() {
  const stored = localStorage.getItem(THEME_KEY);
  if (stored === 'light' || stored === 'dark') document.documentElement.dataset.theme = stored;
  else delete document.documentElement.dataset.theme;
  themeCache = new Map();
  const btn = $('#theme');
  btn.textContent = isDark() ? 'Light theme' : 'Dark theme';
  for (const u of charts) u.redraw(false, true);
  window.dispatchEvent(new Event('sluice:theme')); // pages that paint canvases repaint
}

$('#theme').addEventListener('click', () => {
  localStorage.setItem(THEME_KEY, isDark() ? 'light' : 'dark');
  applyTheme();
});
dark.addEventListener('change', applyTheme);

// color turns '--name' into the property's current value, at draw time.
const color = (c) => (typeof c === 'string' && c.startsWith('--') ? () => cssVar(c) : c);

function chart(el, opts = {}, data) {
  const height = opts.height || 240;
  const axis = (a = {}) => ({
    stroke: () => cssVar('--muted'),
    grid: { stroke: () => cssVar('--border'), width: 1 },
    ticks: { stroke: () => cssVar('--border'), width: 1 },
    ...a,
  });
  const o = {
    ...opts,
    width: Math.max(200, el.clientWidth),
    height,
    axes: (opts.axes || [{}, {}]).map(axis),
    series: (opts.series || []).map((s) => ({ ...s, stroke: color(s.stroke), fill: color(s.fill) })),
  };
  const u = new uPlot(o, data, el);
  charts.add(u);
  const ro = new ResizeObserver(() => {
    const w = Math.max(200, el.clientWidth);
    if (w !== u.width) u.setSize({ width: w, height });
  });
  ro.observe(el);
  const destroy = u.destroy.bind(u);
  u.destroy = () => { ro.disconnect(); charts.delete(u); destroy(); };
  return u;
}

// ---- the confirm dialog ---------------------------------------------------------------------

function confirmDialog({ title, body = '', needReason = true, okText = 'Confirm' }) {
  const dlg = $('#confirm');
  const reason = $('#confirm-reason');
  $('#confirm-title').textContent = title;
  $('#confirm-body').textContent = body;
  $('#confirm-ok').textContent = okText;
  reason.value = '';
  reason.required = needReason;
  $('#confirm-reason-row').hidden = !needReason;
  return new Promise((resolve) => {
    const opener = document.activeElement;
    const form = $('#confirm-form');
    const done = (result) => {
      form.removeEventListener('submit', onSubmit);
      $('#confirm-cancel').removeEventListener('click', onCancel);
      dlg.removeEventListener('cancel', onCancel);
      dlg.removeEventListener('keydown', onKey);
      dlg.close();
      if (opener && opener.isConnected) opener.focus();
      resolve(result);
    };
    const onSubmit = (e) => {
      e.preventDefault();
      if (needReason && !reason.value.trim()) { reason.focus(); return; }
      done({ reason: reason.value.trim() });
    };
    const onCancel = (e) => { e.preventDefault(); done(null); }; // Escape fires 'cancel'
    // showModal makes the page behind inert; this keeps Tab from leaving for the browser's UI.
    const onKey = (e) => {
      if (e.key !== 'Tab') return;
      const f = [...dlg.querySelectorAll('textarea, button')].filter((x) => !x.closest('[hidden]'));
      const first = f[0], last = f[f.length - 1];
      if (e.shiftKey && document.activeElement === first) { e.preventDefault(); last.focus(); }
      else if (!e.shiftKey && document.activeElement === last) { e.preventDefault(); first.focus(); }
    };
    form.addEventListener('submit', onSubmit);
    $('#confirm-cancel').addEventListener('click', onCancel);
    dlg.addEventListener('cancel', onCancel);
    dlg.addEventListener('keydown', onKey);
    dlg.showModal();
    (needReason ? reason : $('#confirm-cancel')).focus();
  });
}

// ---- routing -------------------------------------------------------------------------------

let unmount = null;
let routeSeq = 0;
let routed = false;

function unmountPage() {
  if (unmount) safely(unmount);
  unmount = null;
  $('#page').replaceChildren();
}

function parseHash() {
  const h = location.hash.replace(/^#\/?/, '');
  const q = h.indexOf('?');
  const name = q < 0 ? h : h.slice(0, q);
  return { name: PAGES.includes(name) ? name : '', params: new URLSearchParams(q < 0 ? '' : h.slice(q + 1)) };
}

async function route() {
  if (!$('#login').hidden) return;
  const { name, params } = parseHash();
  if (!name) { location.replace('#/overview'); return; }
  const seq = ++routeSeq;
  for (const a of document.querySelectorAll('nav a')) {
    if (a.getAttribute('href') === `#/${name}`) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  unmountPage();
  let mod;
  try {
    mod = await import(`./pages/${name}.js`);
  } catch (e) {
    if (seq !== routeSeq) return;
    $('#page-title').textContent = name;
    setStatus(`The page "${name}" failed to load: ${e.message}`);
    return;
  }
  if (seq !== routeSeq) return; // another navigation overtook this one
  // After a page change (not the first page), Tab continues from the top of the new content
  // rather than from where the old page's focused element was.
  if (routed) $('#main').focus({ preventScroll: true });
  routed = true;
  setStatus('');
  $('#page-title').textContent = mod.title;
  document.title = `${mod.title} · sluice`;
  const root = document.createElement('div');
  $('#page').replaceChildren(root);
  const ctx = {
    api, scope, params, cssVar, chart,
    navigate: (hash) => { location.hash = hash; },
    onTick: feed.onTick, onHistory: feed.onHistory, history: feed.history,
    confirm: confirmDialog,
  };
  try {
    unmount = mod.mount(root, ctx) || null;
  } catch (e) {
    console.error(e);
    setStatus(`The page failed: ${e.message}`);
  }
}

window.addEventListener('hashchange', route);
// The skip link's #main would be taken for a route: focus the content without changing the hash.
$('.skip').addEventListener('click', (e) => { e.preventDefault(); $('#main').focus(); });

applyTheme();
start();
