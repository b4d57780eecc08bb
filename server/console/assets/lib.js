// Helpers the pages share: building elements (text always through textContent, since keys and
// reasons are user data), formatting numbers, durations, instants and limits in words.

// h('td', {class: 'num', dataset: {key}}, 'text', child…): an element; strings become text nodes.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'value' || (k in el && typeof v !== 'string')) el[k] = v; // value, hidden, disabled…
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// scrollTable wraps a table so that it scrolls sideways on a narrow screen. Every such table
// holds links, so a keyboard reaches (and scrolls) it without the wrapper being a tab stop.
export function scrollTable(table) {
  return h('div', { class: 'table-wrap' }, table);
}

const nf = new Intl.NumberFormat();
const nf1 = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
const nf2 = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });
export const num = (n) => (typeof n === 'number' && isFinite(n) ? nf.format(n) : '–');
export const num1 = (n) => (typeof n === 'number' && isFinite(n) ? nf1.format(n) : '–');
export const num2 = (n) => (typeof n === 'number' && isFinite(n) ? nf2.format(n) : '–');
export const pct = (part, total) => (total > 0 ? `${nf1.format((100 * part) / total)} %` : '–');

// duration(60000) → "1 min", duration(1500) → "1.5 s", duration(86400000) → "1 day".
export function duration(ms) {
  if (!(ms >= 0)) return '–';
  const units = [[86400000, 'day'], [3600000, 'h'], [60000, 'min'], [1000, 's']];
  for (const [size, name] of units) {
    if (ms >= size) {
      const v = ms / size;
      const s = nf1.format(v);
      return name === 'day' ? `${s} day${v === 1 ? '' : 's'}` : `${s} ${name}`;
    }
  }
  return `${nf.format(ms)} ms`;
}

// limitWords describes one limit of the wire form (docs/console.md) in words.
export function limitWords(l) {
  let s;
  switch (l.strategy) {
    case 'gcra':
      s = `${num(l.limit)} / ${duration(l.periodMs)}, burst ${num(l.burst)}`;
      break;
    case 'tokenBucket':
      s = `capacity ${num(l.capacity)}, refills ${num2(l.refillPerSec)}/s`;
      break;
    case 'fixedWindow':
      s = l.calendar
        ? `${num(l.limit)} / calendar ${l.calendar}${l.timezone ? ` (${l.timezone})` : ' (UTC)'}`
        : `${num(l.limit)} / ${duration(l.windowMs)} window`;
      break;
    case 'slidingWindow':
      s = `${num(l.limit)} / sliding ${duration(l.windowMs)}${l.buckets ? ` (${l.buckets} buckets)` : ''}`;
      break;
    case 'slidingWindowLog':
      s = `${num(l.limit)} / sliding ${duration(l.windowMs)} (log)`;
      break;
    default:
      s = l.strategy || 'unknown';
  }
  if (l.unit === 'request') s += ' (1 per check, whatever its cost)';
  return l.name ? `${l.name}: ${s}` : s;
}
export const limitsWords = (limits) => (limits && limits.length ? limits.map(limitWords).join('; ') : '–');

const timeFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
const dateTimeFmt = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });

// localTime(ms): the time of day when ms is today, else date and time.
export function localTime(ms) {
  if (!ms) return '–';
  const d = new Date(ms);
  return d.toDateString() === new Date().toDateString() ? timeFmt.format(d) : dateTimeFmt.format(d);
}

// relative(ms) → "in 12 s", "3 min ago", "now".
export function relative(ms, now = Date.now()) {
  const d = ms - now;
  if (Math.abs(d) < 500) return 'now';
  return d > 0 ? `in ${duration(Math.round(d / 1000) * 1000 || d)}` : `${duration(Math.round(-d / 1000) * 1000 || -d)} ago`;
}

// parseDuration("90s" | "15m" | "2h" | "1d" | "500ms") → ms, or NaN.
export function parseDuration(s) {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)\s*$/i.exec(s);
  if (!m) return NaN;
  const unit = { ms: 1, s: 1000, m: 60000, min: 60000, h: 3600000, d: 86400000 }[m[2].toLowerCase()];
  return Math.round(parseFloat(m[1]) * unit);
}

// errorText turns a ctx.api error into a sentence for a status line.
export function errorText(e) {
  if (e.status === 403) return `Refused: this needs an admin token (${e.message}).`;
  if (e.status === 0) return `The server cannot be reached: ${e.message}.`;
  return `${e.status ? `Error ${e.status}` : 'Error'}: ${e.message}`;
}

// sparkline draws allowed and denied per second on a small canvas: each pixel column holds the
// most of its seconds, so 900 seconds fit 140 pixels without losing a spike. Cheap enough to
// redraw 100 of them every second, where 100 uPlot instances would not be.
// w and hgt are the canvas's CSS size (canvas.spark in style.css): reading clientWidth here
// would force a layout per canvas, for 100 rows hundreds of milliseconds.
export function sparkline(canvas, allowed, denied, colors, w = 140, hgt = 28) {
  const dpr = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(w * dpr)) { canvas.width = Math.round(w * dpr); canvas.height = Math.round(hgt * dpr); }
  const g = canvas.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, hgt);
  const n = allowed.length;
  if (!n) return;
  const cols = Math.min(w, n);
  const colMax = (arr) => {
    const out = new Array(cols).fill(0);
    for (let i = 0; i < n; i++) { const c = Math.floor((i * cols) / n); if (arr[i] > out[c]) out[c] = arr[i]; }
    return out;
  };
  const a = colMax(allowed), d = colMax(denied);
  let max = 1;
  for (let i = 0; i < cols; i++) max = Math.max(max, a[i], d[i]);
  const line = (vals, stroke) => {
    g.beginPath();
    for (let i = 0; i < cols; i++) {
      const x = cols === 1 ? w : (i * (w - 1)) / (cols - 1) + 0.5;
      const y = hgt - 1.5 - (vals[i] / max) * (hgt - 3);
      if (i) g.lineTo(x, y); else g.moveTo(x, y);
    }
    g.strokeStyle = stroke;
    g.lineWidth = 1.25;
    g.stroke();
  };
  line(a, colors.allowed);
  line(d, colors.denied);
}

// loadPolicies answers GET v1/console/policies's body.
export const loadPolicies = (ctx) => ctx.api('v1/console/policies');

// fillPolicySelect fills a <select> with the policies' names (allLabel: a first option "" for
// all of them), selecting want when it is one of them.
export function fillPolicySelect(select, names, want, allLabel) {
  const opts = names.map((n) => h('option', { value: n }, n));
  if (allLabel !== undefined) opts.unshift(h('option', { value: '' }, allLabel));
  select.replaceChildren(...opts);
  if (want !== undefined && (names.includes(want) || want === '')) select.value = want;
}

// markRendered marks the page's first data on screen, once per mount.
export function markRendered(page) {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    performance.mark(`sluice:rendered:${page}`);
  };
}
