// smsgw ops page. It polls the public admin API every 2 s (backing off on
// errors) and renders what it gets. No framework and no third-party code.
// The DOM is built from elements and text nodes only: the page's CSP
// requires Trusted Types, so any HTML string sink would throw. Figures the
// API does not report are shown as "—", never guessed. When the gateway
// could not read part of its state (Redis down: stats.unavailable), the
// page says so in a banner and shows the rest, this replica's own view;
// what is missing is shown as unavailable, never as 0.

const KEY_STORAGE = 'smsgw.adminKey';
const POLL_MS = 2000;
const MAX_BACKOFF_MS = 30000;
const STALE_MS = 10000;
const REQUEST_TIMEOUT_MS = 5000;
const DEAD_LIMIT = 50;
const CLASS_ORDER = ['otp', 'transactional', 'marketing'];
const OTP_LATE_S = 5; // a queued OTP older than this is late
const OTP_VERY_LATE_S = 30;
const OTP_P99_SLOW_MS = 20; // accept-to-provider p99 at or above this is SLOW
const OTP_503_RECENT_MS = 10000; // BLOCKED while fast-path 503s grew this recently
const MESSAGE_ID = /^msg_[0-9A-HJKMNP-TV-Z]{26}$/;
const BACKLOG_SLOW_S = 300; // oldest ready message this old while not paused: sending is slow
const HISTORY_MS = 5000; // the history has one step per 5 s: no need to ask more often
const USAGE_MS = 30000; // usage counts whole days: asked every 30 s
const DRAIN_SLOW_S = 6 * 3600; // a backlog that takes longer to drain is a problem (as the alert says)
const SVG_NS = 'http://www.w3.org/2000/svg';
// Relative to /dashboard/, so the page also works behind a path prefix.
const API = '../v1/admin/';
// The sections of the stats answer the gateway may leave out (it names
// them in unavailable), as the outage banner names them.
const SECTION_NAMES = { classes: 'queue depths', counters: 'totals', callbacks: 'callbacks', protection: 'protection' };

const $ = (id) => document.getElementById(id);

class AuthError extends Error {}
// APIError is a failed request: status is the HTTP status the gateway
// answered with, or 0 when it did not answer (unreachable, timed out).
class APIError extends Error {
  constructor(message, status = 0) {
    super(message);
    this.status = status;
  }
}

const state = {
  session: 0, // bumped on every sign-in and sign-out; late answers of an old session are dropped
  stats: null,
  dead: null,
  deadErr: '', // why the last dead-letter list could not be read; '' when it was
  deadSig: '',
  lastOK: 0,
  lastErr: '',
  lastStatus: 0, // the HTTP status of the last failed update; 0: no answer
  failures: 0,
  nextAt: 0,
  timer: 0,
  inflight: -1, // the session whose poll is running, or -1
  again: false,
  prevSent: null, // {t, total} for a rate from sent_total counters
  rate: null,
  otp503: null, // {total, scope, grewAt}: when the fast path's 503 count last grew
  history: null, // the last GET history answer
  historyAt: 0, // when it arrived
  historyErr: '',
  usage: null, // the last GET usage answer
  usageAt: 0,
  usageErr: '',
};

// ---- key -------------------------------------------------------------

function getKey() {
  try {
    return sessionStorage.getItem(KEY_STORAGE) || '';
  } catch {
    return '';
  }
}

function setKey(k) { sessionStorage.setItem(KEY_STORAGE, k); }
function clearKey() { sessionStorage.removeItem(KEY_STORAGE); }

// ---- API -------------------------------------------------------------

async function api(method, path, body) {
  const key = getKey();
  if (!key) throw new AuthError('no admin key');
  const headers = { Authorization: 'Bearer ' + key, Accept: 'application/json' };
  const ctl = new AbortController();
  const init = {
    method, headers, signal: ctl.signal,
    cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer', redirect: 'error',
  };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const timer = setTimeout(() => ctl.abort(), REQUEST_TIMEOUT_MS);
  let res, text;
  try {
    res = await fetch(API + path, init);
    text = await res.text();
  } catch {
    throw new APIError(ctl.signal.aborted ? 'the gateway did not answer in time' : 'the gateway is unreachable');
  } finally {
    clearTimeout(timer);
  }
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  const why = (data && (data.detail || data.title)) || `HTTP ${res.status}`;
  if (res.status === 401 || res.status === 403) throw new AuthError(why);
  if (!res.ok) throw new APIError(why, res.status);
  return data;
}

// ---- formatting ------------------------------------------------------

const num = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const fmtInt = (v) => (num(v) === null ? '—' : Math.round(v).toLocaleString('en-US'));
const fmtRate = (v) => (num(v) === null ? '—' : `${v.toFixed(v < 10 ? 1 : 0)}/s`);

function fmtSecs(s) {
  if (num(s) === null) return '—';
  if (s < 10) return `${s.toFixed(s < 1 && s > 0 ? 1 : 0)} s`;
  if (s < 60) return `${Math.round(s)} s`;
  if (s < 3600) return Math.round(s % 60) === 0 ? `${Math.floor(s / 60)} min` : `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

const fmtMs = (ms) => (num(ms) === null ? '—' : ms < 10 && ms > 0 ? `${ms.toFixed(1)} ms` : ms < 1000 ? `${Math.round(ms)} ms` : fmtSecs(ms / 1000));

// Times are UTC, like the logs an operator will compare them with.
function fmtClock(t) {
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? '—' : d.toISOString().slice(11, 19) + ' UTC';
}

function fmtDateTime(t) {
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? '—' : d.toISOString().slice(0, 19).replace('T', ' ') + ' UTC';
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'data') Object.assign(e.dataset, v);
    else e.setAttribute(k, v);
  }
  e.append(...children.map((c) => (c instanceof Node ? c : String(c))));
  return e;
}

// ---- rendering -------------------------------------------------------

// scopeName names a pause of one class or one producer.
function scopeName(p) {
  return p.class ? `class ${p.class}` : `producer ${p.producer}`;
}

// renderScopes lists the pauses of one class or producer, each with its
// own resume button.
function renderScopes(s) {
  const list = $('scoped-pauses');
  list.replaceChildren();
  for (const p of s.pause?.scopes || []) {
    const li = document.createElement('li');
    const until = p.until ? `until ${fmtClock(p.until)}` : 'until resumed';
    li.textContent = `${scopeName(p)} paused ${until}${p.reason ? ` · “${p.reason}”` : ''} `;
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'primary';
    b.textContent = `Resume ${scopeName(p)}`;
    b.dataset.scope = p.class ? `class:${p.class}` : `producer:${p.producer}`;
    b.addEventListener('click', () => act(b, 'resume', p.class ? { class: p.class } : { producer: p.producer }, `${scopeName(p)} resumed.`));
    li.append(b);
    list.append(li);
  }
}

function tile(name, st, value, detail) {
  $('tile-' + name).dataset.state = st;
  $('st-' + name).textContent = value;
  $('st-' + name + '-detail').textContent = detail;
}

function classNames(classes) {
  const extra = Object.keys(classes).filter((c) => !CLASS_ORDER.includes(c)).sort();
  return CLASS_ORDER.filter((c) => c in classes).concat(extra);
}

// queued is ready + scheduled + in flight; null when none is reported.
function queued(c) {
  const parts = [c?.ready, c?.scheduled, c?.leased].map(num);
  return parts.every((v) => v === null) ? null : parts.reduce((a, v) => a + (v ?? 0), 0);
}

// missing lists the sections the gateway could not read for this answer.
const missing = (s) => (Array.isArray(s.unavailable) ? s.unavailable : []);

// otp503Of is the fast path's 503 count: every replica's (the counters)
// when the gateway could read them, else the answering replica's own.
function otp503Of(s) {
  const shared = num(s.otp?.unavailable_total);
  if (shared !== null) return { total: shared, scope: 'shared' };
  const own = num(s.otp?.replica_unavailable_total);
  return own === null ? null : { total: own, scope: 'replica' };
}

// sendRate is the provider's achieved rate: reported directly, or derived
// from per-class sent_total counters between two polls; null when neither.
function sendRate(s, now) {
  const direct = num(s.provider?.sent_per_second);
  if (direct !== null) return direct;
  const cs = Object.values(s.classes || {});
  if (cs.length === 0 || cs.some((c) => num(c.sent_total) === null)) {
    state.prevSent = null;
    return null;
  }
  const total = cs.reduce((a, c) => a + c.sent_total, 0);
  const prev = state.prevSent;
  state.prevSent = { t: now, total };
  if (!prev || now <= prev.t || total < prev.total) return state.rate; // first sample or counter reset
  state.rate = ((total - prev.total) * 1000) / (now - prev.t);
  return state.rate;
}

// otp503Growing tells whether the fast path's 503 count (otp503Of) grew
// within OTP_503_RECENT_MS. The first sample only sets the baseline: 503s
// from before the page opened are history, not news; so does a change of
// scope (the shared count lost in an outage or back after it).
function otp503Growing(cur, now) {
  if (cur === null) {
    state.otp503 = null;
    return false;
  }
  const { total, scope } = cur;
  const prev = state.otp503;
  if (!prev || prev.scope !== scope || total < prev.total) state.otp503 = { total, scope, grewAt: 0 };
  else if (total > prev.total) state.otp503 = { total, scope, grewAt: now };
  return state.otp503.grewAt > 0 && now - state.otp503.grewAt < OTP_503_RECENT_MS;
}

function renderTiles(s, now, rate) {
  const depths = !!s.classes; // false: the gateway could not read the queue
  const classes = s.classes || {};
  const all = Object.values(classes);
  const backlog = all.reduce((a, c) => a + (queued(c) ?? 0), 0);
  const ready = all.reduce((a, c) => a + (num(c.ready) ?? 0), 0);
  const oldest = Math.max(0, ...all.map((c) => num(c.oldest_age_seconds) ?? 0));
  const paused = s.pause?.paused === true;
  const holdMs = num(s.limiter?.pause_remaining_ms) ?? 0;
  const mode = s.limiter?.mode;
  const rateText = `rate ${fmtRate(rate)}`;

  if (paused) tile('sending', 'bad', 'NO', `paused by an operator · ${depths ? `${fmtInt(backlog)} queued` : 'queue depth unavailable'}`);
  else if (holdMs > 0) tile('sending', 'warn', 'HELD', `provider answered 429: every replica waits ${fmtMs(holdMs)}`);
  else if (!depths) tile('sending', 'unknown', '—', `queue depth unavailable · ${rateText}`);
  else if (rate === 0 && ready > 0) tile('sending', 'bad', 'STALLED', `${fmtInt(backlog)} queued, nothing sent`);
  else if (ready > 0 && oldest > BACKLOG_SLOW_S) tile('sending', 'warn', 'SLOW', `${fmtInt(backlog)} queued, oldest waits ${fmtSecs(oldest)} · ${rateText}`);
  else if (backlog > 0 || rate > 0) tile('sending', 'ok', 'YES', `${fmtInt(backlog)} queued · ${rateText}`);
  else tile('sending', 'ok', 'IDLE', `queue empty · ${rateText}`);

  const scopes = s.pause?.scopes || [];
  if (paused) {
    const until = s.pause.until ? `until ${fmtClock(s.pause.until)} (${fmtSecs(Math.max(0, (Date.parse(s.pause.until) - now) / 1000))} left)` : 'until resumed';
    tile('pause', 'bad', 'PAUSED', until + (s.pause.reason ? ` · “${s.pause.reason}”` : ''));
  } else if (scopes.length > 0) {
    tile('pause', 'warn', 'PARTLY', scopes.map(scopeName).join(', ') + ' paused; the rest flows');
  } else {
    tile('pause', 'ok', 'NO', 'sending allowed');
  }

  const global = (s.limiter?.keys || []).find((k) => k.name === 'global');
  if (mode === 'shared') tile('redis', 'ok', 'OK', 'one shared limit for every replica');
  else if (mode === 'fallback') tile('redis', 'bad', 'DOWN', `fallback: each process sends at most ${fmtRate(global?.rate_per_second)}`);
  else if (mode === 'local') tile('redis', 'none', 'NOT USED', 'embedded store: one replica, local limiter');
  else tile('redis', 'unknown', '—', 'limiter mode not reported');

  // Without the queue's figures the tile judges what this replica knows:
  // its OTP latency, its 503s, the pause and the 429 hold.
  const otp = classes.otp || {};
  const otpQueued = depths ? (queued(otp) ?? 0) : null;
  const otpAge = num(otp.oldest_age_seconds) ?? 0;
  const p99 = num(s.otp?.latency_p99_ms);
  const p99Text = p99 === null ? 'no OTP sent yet' : `p99 ${fmtMs(p99)}`;
  const o503 = otp503Of(s);
  const refusedRecently = otp503Growing(o503, now);
  const waiting = otpQueued === null ? 'queue unavailable' : otpQueued ? fmtInt(otpQueued) + ' queued' : 'none waiting';
  if (paused || scopes.some((p) => p.class === 'otp')) tile('otp', 'bad', 'BLOCKED', 'paused: POST /v1/otp answers 503');
  else if (refusedRecently) {
    tile('otp', 'bad', 'BLOCKED', `POST /v1/otp answers 503 (${fmtInt(o503.total)} so far${o503.scope === 'replica' ? ' on this replica' : ''}) · ${p99Text}`);
  } else if (holdMs > 0) tile('otp', 'warn', 'HELD', `provider 429 hold, ${fmtMs(holdMs)} left`);
  else if (otpQueued > 0 && otpAge > OTP_LATE_S) tile('otp', otpAge > OTP_VERY_LATE_S ? 'bad' : 'warn', 'LATE', `oldest queued OTP waits ${fmtSecs(otpAge)} · ${p99Text}`);
  else if (p99 !== null && p99 >= OTP_P99_SLOW_MS) tile('otp', 'warn', 'SLOW', `${p99Text}, want under ${OTP_P99_SLOW_MS} ms · ${waiting}`);
  else tile('otp', 'ok', 'OK', `${waiting} · ${p99Text}`);

  // The tab title carries the alarms, for a page left open in the background.
  const names = { sending: 'Sending', pause: '', redis: 'Redis', otp: 'OTP' };
  const alarms = Object.keys(names)
    .filter((n) => ['bad', 'warn'].includes($('tile-' + n).dataset.state))
    .map((n) => `${names[n]} ${$('st-' + n).textContent}`.trim());
  document.title = (alarms.length ? alarms.join(' · ') + ' — ' : '') + 'smsgw ops';
}

// fmtRatio shows a delivery ratio as a percentage; '—' when no receipt came.
function fmtRatio(r) {
  const v = num(r);
  return v === null ? '—' : (v * 100).toFixed(1) + ' %';
}

function renderQueues(s) {
  // Without the queue's figures each class still has its row, every figure
  // "—" (unavailable), so that no one reads an empty queue.
  const depths = !!s.classes;
  const classes = s.classes || Object.fromEntries(CLASS_ORDER.map((c) => [c, {}]));
  const rows = classNames(classes).map((name) => {
    const c = classes[name] || {};
    // data-label names the column where a phone shows each row as a list.
    const td = (field, label, text) => el('td', { class: 'num', data: { field, label } }, text);
    return el('tr', { data: { class: name, unavailable: String(!depths) } },
      el('th', { scope: 'row', data: { label: 'Class' } }, name),
      td('queued', 'Queued', fmtInt(queued(c))),
      td('ready', 'Ready', fmtInt(c.ready)),
      td('scheduled', 'Scheduled', fmtInt(c.scheduled)),
      td('leased', 'In flight', fmtInt(c.leased)),
      td('oldest', 'Oldest waiting', queued(c) ? fmtSecs(c.oldest_age_seconds) : '—'),
      td('dead', 'Dead', fmtInt(c.dead)),
      td('sent', 'Sent', fmtInt(c.sent_total)),
      td('failed', 'Failed', fmtInt(c.failed_total)),
      td('expired', 'Expired', fmtInt(c.expired_total)),
      td('delivered', 'Delivered', fmtRatio(c.delivery_ratio)));
  });
  if (rows.length === 0) rows.push(el('tr', { class: 'empty' }, el('td', { colspan: '11' }, 'No classes reported.')));
  document.querySelector('#queues tbody').replaceChildren(...rows);
  const ct = s.counters;
  $('counters-scope').textContent = !ct ? `Sent, failed, expired: ${missing(s).includes('counters') ? 'unavailable' : 'not reported'}.`
    : `Sent, failed, expired: since ${fmtDateTime(ct.since)}, ${ct.scope === 'shared' ? 'all replicas' : 'this process only'}.`;
}

// PAUSE_REASONS names the provider's reasons for a sender's pause.
const PAUSE_REASONS = { throttled: 'throttled by the provider', queue_full: 'its queue at the provider full', setup: 'its setup refused' };

// renderLanes shows the sender lanes: each configured sender and "other",
// its limit, this replica's send rate, its pause, and its backlog when the
// gateway reports it ("—" otherwise).
function renderLanes(s) {
  const now = Date.now();
  const rows = (s.sender_lanes || []).map((l) => {
    const td = (field, label, text, cls = 'num') => el('td', { class: cls, data: { field, label } }, text);
    const until = l.paused_until ? new Date(l.paused_until).getTime() : NaN;
    const paused = Number.isFinite(until) && until > now;
    const pause = paused
      ? `${fmtClock(l.paused_until)} (${fmtSecs(Math.ceil((until - now) / 1000))} left)${l.pause_reason ? ` · ${PAUSE_REASONS[l.pause_reason] || l.pause_reason}` : ''}`
      : 'no';
    return el('tr', { data: { sender: l.sender, paused: String(paused) } },
      el('th', { scope: 'row', data: { label: 'Sender' } }, l.sender),
      td('max_rps', 'Limit', num(l.max_rps) === null ? 'account’s' : fmtRate(l.max_rps)),
      td('rate', 'Sending', fmtRate(num(l.sent_per_second))),
      td('paused', 'Paused until', pause, ''),
      td('backlog', 'Backlog', fmtInt(num(l.backlog))),
      td('oldest', 'Oldest waiting', fmtSecs(num(l.oldest_seconds))));
  });
  if (rows.length === 0) rows.push(el('tr', { class: 'empty' }, el('td', { colspan: '6' }, 'No sender lanes reported.')));
  document.querySelector('#sender-lanes tbody').replaceChildren(...rows);
}

function renderLimiter(s) {
  const l = s.limiter || {};
  const modes = { local: 'local (embedded, one replica)', shared: 'shared (Redis)', fallback: 'FALLBACK (Redis unreachable)' };
  $('lim-mode').textContent = modes[l.mode] || l.mode || '—';
  $('lim-mode').dataset.mode = l.mode || '';
  const hold = num(l.pause_remaining_ms);
  $('lim-hold').textContent = hold === null ? '—' : hold > 0 ? `${fmtMs(hold)} left` : 'none';
  const rows = (l.keys || []).map((k) => el('tr', { data: { key: k.name } },
    el('th', { scope: 'row' }, k.name),
    el('td', { class: 'num' }, fmtRate(k.rate_per_second)),
    el('td', { class: 'num' }, fmtInt(k.burst)),
    el('td', { class: 'num' }, fmtMs(k.ahead_ms))));
  document.querySelector('#limiter-keys tbody').replaceChildren(...rows);
}

function setMeter(id, value, max, low, high, optimum) {
  const m = $(id);
  const ok = num(value) !== null && num(max) !== null && max > 0;
  // Attributes in the order the clamping rules need: max before the rest.
  m.max = ok ? max : 1;
  m.low = ok && num(low) !== null ? low : m.max;
  m.high = ok && num(high) !== null ? high : m.max;
  m.optimum = ok && num(optimum) !== null ? optimum : 0;
  m.value = ok ? Math.min(value, max) : 0;
  m.dataset.value = ok ? String(value) : '';
}

function renderProvider(s, rate) {
  const p = s.provider || {};
  const o = s.otp || {};
  $('pv-name').textContent = p.name ? `(${p.name})` : '';
  $('pv-rate').textContent = fmtRate(rate);
  $('pv-target').textContent = fmtRate(num(p.target_rps));
  $('pv-contract').textContent = fmtRate(num(p.contract_rps));
  const contract = num(p.contract_rps);
  const target = num(p.target_rps);
  // Green up to the target, red above it (the gateway should never be there).
  setMeter('pv-rate-meter', rate, contract, target, target, 0);
  $('pv-rate-scope').textContent = num(p.sent_per_second) === null
    ? (missing(s).includes('counters') ? 'Send rate and 429 total unavailable (they come from the totals).' : '')
    : `Messages per second over the last 10 s, ${p.rate_scope === 'shared' ? 'all replicas' : 'this replica only'}.`;

  const win = num(p.throttled_in_window);
  const limit = num(p.suspend_after);
  const activate = num(p.guard_activate_at);
  $('pv-429-window').textContent = win === null ? '—' : limit === null ? fmtInt(win) : `${fmtInt(win)} of ${fmtInt(limit)}`;
  setMeter('pv-guard-meter', win, limit, activate === null ? null : activate / 2, activate, 0);
  const winText = num(p.window_seconds) === null ? '' : ` within ${fmtSecs(p.window_seconds)}`;
  $('pv-guard-detail').textContent = limit === null ? '—'
    : `The provider suspends the account after ${fmtInt(limit)} 429s${winText}.` +
      (activate === null ? '' : ` From ${fmtInt(activate)} every replica sends at a reduced rate.`);
  $('pv-guard-state').hidden = p.guard_active !== true;
  $('pv-429').textContent = fmtInt(p.throttled_total);
  $('pv-otp-p50').textContent = fmtMs(num(o.latency_p50_ms));
  $('pv-otp-p99').textContent = fmtMs(num(o.latency_p99_ms));
  const o503 = otp503Of(s);
  $('pv-otp-503').textContent = o503 === null ? '—' : fmtInt(o503.total) + (o503.scope === 'replica' ? ' (this replica)' : '');
  renderCallbacks(s.callbacks);
}

// renderCallbacks shows the outbox of status callbacks to producers: how
// many wait (and for how long the oldest has), how many were given up.
function renderCallbacks(c) {
  const backlog = num(c?.backlog);
  const age = num(c?.oldest_age_seconds);
  const b = $('cb-backlog');
  b.textContent = backlog === null ? '—' : backlog > 0 && age !== null ? `${fmtInt(backlog)} · oldest ${fmtSecs(age)}` : fmtInt(backlog);
  b.dataset.value = backlog === null ? '' : String(backlog);
  const dead = num(c?.dead);
  $('cb-dead').textContent = dead === null ? '—' : fmtInt(dead);
  $('cb-dead').dataset.state = dead === null ? '' : dead > 0 ? 'bad' : 'ok';
}

const REFUSAL_REASONS = ['country', 'number_type', 'suppressed', 'otp_per_number'];

function renderProtection(s) {
  const p = s.protection || {};
  const refused = p.refused || {};
  for (const r of REFUSAL_REASONS) $('pr-' + r).textContent = fmtInt(num(refused[r]));
  $('pr-suppressions').textContent = fmtInt(num(p.suppressions));
}

function renderReplica(s) {
  const r = s.replica;
  const e = $('replica');
  e.hidden = !r;
  if (!r) return;
  const store = r.mode === 'redis' ? 'Redis' : r.mode === 'embedded' ? 'embedded store' : r.mode;
  e.textContent = `Answered by replica ${r.owner} · up ${fmtSecs(r.uptime_seconds)} · ${store}`;
}

// renderDead shows the dead letters; err (the list could not be read) shows
// the panel as unavailable rather than empty.
function renderDead(s, d, err) {
  const summary = $('dead-summary');
  summary.dataset.state = err ? 'unavailable' : '';
  if (err) {
    summary.textContent = `Dead letters unavailable: ${err}`;
    if (state.deadSig !== 'unavailable') {
      state.deadSig = 'unavailable';
      document.querySelector('#dead tbody').replaceChildren(el('tr', { class: 'empty' }, el('td', { colspan: '8' }, 'Unavailable.')));
    }
    return;
  }
  const total = s.classes ? Object.values(s.classes).reduce((a, c) => a + (num(c.dead) ?? 0), 0) : null;
  const msgs = d?.messages || [];
  summary.textContent = msgs.length === 0
    ? 'No dead letters.'
    : `${total === null ? 'Total unavailable' : `${fmtInt(total)} dead in total`}; showing the oldest ${fmtInt(msgs.length)}.`;
  // Rebuild only when the list changed, so a focused Retry button keeps focus.
  const sig = JSON.stringify(msgs.map((m) => [m.id, m.attempts, m.last_error]));
  if (sig === state.deadSig) return;
  state.deadSig = sig;
  const rows = msgs.map((m) => el('tr', { data: { id: m.id } },
    el('td', { class: 'mono', data: { label: 'Message' } }, m.id),
    el('td', { data: { label: 'Class' } }, m.class || '—'),
    el('td', { class: 'mono', data: { field: 'to', label: 'To' } }, m.to || '—'),
    el('td', { data: { label: 'Producer' } }, m.producer || '—'),
    el('td', { class: 'num', data: { label: 'Attempts' } }, fmtInt(m.attempts)),
    el('td', { class: 'err', data: { label: 'Last error' } }, m.last_error || '—'),
    el('td', { data: { label: 'Created' } }, fmtDateTime(m.created_at)),
    el('td', { class: 'action' }, retryButton(m.id))));
  if (rows.length === 0) rows.push(el('tr', { class: 'empty' }, el('td', { colspan: '8' }, 'None.')));
  document.querySelector('#dead tbody').replaceChildren(...rows);
}

function retryButton(id) {
  const b = el('button', { type: 'button', class: 'small', 'aria-label': `Retry message ${id}` }, 'Retry');
  b.addEventListener('click', () => act(b, `dead-letters/${encodeURIComponent(id)}/retry`, undefined, `Message ${id} queued again.`));
  return b;
}

// ---- history: the last 15 minutes ---------------------------------------

function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  e.append(...children.map((c) => (c instanceof Node ? c : String(c))));
  return e;
}

// niceMax rounds a chart's top up to 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 5, 10].map((m) => m * p).find((m) => m >= v);
}

const fmtAxis = (v) => (v >= 10000 ? `${Math.round(v / 1000)}k` : Number.isInteger(v) ? fmtInt(v) : v.toFixed(1));

// drawChart draws one history chart into box as an SVG as wide as the box:
// series of lines (null: no value, a gap) or bars, with dashed reference
// lines (limits). Text stays at its real size on any screen. Each series'
// path says how many points it has and its largest value (data-points,
// data-max), for people reading the DOM and for the browser test.
function drawChart(box, h, { series, refs = [], bars = false, unit = '' }) {
  // Bars count events: no half-event tick.
  const W = Math.max(200, Math.floor(box.clientWidth || 0));
  const H = 150;
  const m = { l: 46, r: 8, t: 10, b: 22 };
  const n = Math.max(1, h.throttled.length);
  const pw = W - m.l - m.r;
  const ph = H - m.t - m.b;
  const values = series.flatMap((s) => s.values.filter((v) => v !== null));
  const top = niceMax(Math.max(0, ...values, ...refs.map((r) => r.value)) * 1.08);
  const x = (i) => m.l + ((i + 0.5) * pw) / n;
  const y = (v) => m.t + ph - (v / top) * ph;
  const parts = [svg('title', {}, box.dataset.title || '')];
  for (const v of [0, top / 2, top].filter((v) => !bars || Number.isInteger(v))) {
    parts.push(svg('line', { class: 'grid', x1: m.l, x2: W - m.r, y1: y(v), y2: y(v) }));
    parts.push(svg('text', { class: 'axis-label', x: m.l - 6, y: y(v) + 4, 'text-anchor': 'end' }, fmtAxis(v) + unit));
  }
  const span = (h.throttled.length * h.step_seconds) / 60;
  for (const [frac, label] of [[0, `−${Math.round(span)} min`], [1 / 3, `−${Math.round((span * 2) / 3)}`], [2 / 3, `−${Math.round(span / 3)}`], [1, 'now']]) {
    parts.push(svg('text', { class: 'axis-label', x: m.l + frac * pw, y: H - 6, 'text-anchor': frac === 0 ? 'start' : frac === 1 ? 'end' : 'middle' }, label));
  }
  for (const r of refs) {
    parts.push(svg('line', { class: `ref ${r.cls}`, x1: m.l, x2: W - m.r, y1: y(r.value), y2: y(r.value) }));
    parts.push(svg('text', { class: `ref-label ${r.cls}`, x: W - m.r - 2, y: y(r.value) - 3, 'text-anchor': 'end' }, r.label));
  }
  for (const s of series) {
    let d = '';
    let points = 0;
    let pen = false;
    s.values.forEach((v, i) => {
      if (v === null) {
        pen = false;
        return;
      }
      points++;
      if (bars) {
        const bw = Math.max(1, pw / n - 1);
        if (v > 0) d += `M${(x(i) - bw / 2).toFixed(1)} ${y(0).toFixed(1)}V${y(v).toFixed(1)}h${bw.toFixed(1)}V${y(0).toFixed(1)}Z`;
        return;
      }
      d += `${pen ? 'L' : 'M'}${x(i).toFixed(1)} ${y(v).toFixed(1)}`;
      pen = true;
    });
    const vals = s.values.filter((v) => v !== null);
    parts.push(svg('path', {
      class: `${bars ? 'bar' : 'series'} s-${s.name}`, d: d || 'M0 0', 'data-series': s.name,
      'data-points': points, 'data-max': vals.length ? Math.max(...vals) : 0,
    }));
  }
  box.replaceChildren(svg('svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': box.dataset.title || '' }, ...parts));
}

function lastValue(values) {
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null) return values[i];
  return null;
}

// keepingPace: a backlog that does not shrink but is no more than a few
// seconds of arrivals in flight (a steady trickle), not a growing one.
const keepingPace = (p) => p.drain_seconds === null && p.send_rate > 0 && p.backlog <= Math.max(1, p.arrival_rate * 5);

function renderDrain(h) {
  const e = $('drain');
  const d = h.drain;
  const list = [];
  if (!d) {
    e.dataset.state = 'unknown';
    e.dataset.seconds = '';
    e.textContent = 'Backlog: no queue depth recorded in the last minute.';
  } else {
    const t = d.total;
    const pace = `${fmtRate(t.send_rate)} sent − ${fmtRate(t.arrival_rate)} queued, last ${fmtSecs(d.over_seconds)}`;
    e.dataset.seconds = t.drain_seconds === null ? '' : String(t.drain_seconds);
    if (t.backlog === 0) {
      e.dataset.state = 'ok';
      e.textContent = 'Backlog: none due.';
    } else if (keepingPace(t)) {
      e.dataset.state = 'ok';
      e.textContent = `Backlog ${fmtInt(t.backlog)} due, keeping pace (${pace}).`;
    } else if (t.drain_seconds === null) {
      e.dataset.state = 'bad';
      e.textContent = `Backlog ${fmtInt(t.backlog)} due, not shrinking (${pace}).`;
    } else {
      e.dataset.state = t.drain_seconds > DRAIN_SLOW_S ? 'warn' : 'ok';
      e.textContent = `Backlog ${fmtInt(t.backlog)} due, drains in ${fmtSecs(t.drain_seconds)} at this pace (${pace}).`;
    }
    for (const name of classNames(d.by_class || {})) {
      const c = d.by_class[name];
      if (!c.backlog) continue;
      list.push(el('li', { data: { class: name } }, `${name}: ${fmtInt(c.backlog)} due, ` +
        (keepingPace(c) ? 'keeping pace' : c.drain_seconds === null ? 'not shrinking' : `drains in ${fmtSecs(c.drain_seconds)}`)));
    }
  }
  $('drain-classes').replaceChildren(...list);
}

// ---- usage: messages and units per producer and day ---------------------

// renderUsage shows GET usage: one row per day, producer, class and
// country, newest day first; the final statuses as "sent 2 (4 u)".
function renderUsage() {
  const u = state.usage;
  $('usage-msg').textContent = state.usageErr ? `Usage not updated: ${state.usageErr}`
    : u ? `From ${u.from} to ${u.to} (UTC days), every replica.` : '';
  if (!u) return;
  const td = (field, label, text) => el('td', { class: 'num', data: { field, label } }, text);
  const rows = [...u.rows].reverse().map((r) => el('tr', { data: { day: r.day, producer: r.producer, class: r.class, country: r.country } },
    el('th', { scope: 'row', data: { label: 'Day' } }, r.day),
    el('td', { data: { field: 'producer', label: 'Producer' } }, r.producer),
    el('td', { data: { field: 'class', label: 'Class' } }, r.class),
    el('td', { data: { field: 'country', label: 'Country' } }, r.country),
    td('messages', 'Accepted', fmtInt(r.accepted.messages)),
    td('units', 'Units', fmtInt(r.accepted.units)),
    el('td', { data: { field: 'final', label: 'Ended' } },
      Object.entries(r.final).sort().map(([st, c]) => `${st} ${fmtInt(c.messages)} (${fmtInt(c.units)} u)`).join(', ') || '—')));
  if (rows.length === 0) rows.push(el('tr', { class: 'empty' }, el('td', { colspan: '7' }, 'No messages in these days.')));
  document.querySelector('#usage tbody').replaceChildren(...rows);
}

function renderHistory() {
  const h = state.history;
  $('history-msg').textContent = state.historyErr ? `History not updated: ${state.historyErr}` : h
    ? `One step every ${fmtSecs(h.step_seconds)}, ${h.scope === 'shared' ? 'all replicas' : 'this process only'}. ` +
      'Drain time: backlog B / (sent μ − queued λ₀) over the last minute.'
    : '';
  if (!h) return;
  $('history-scope').textContent = h.scope === 'shared' ? '(all replicas)' : '(this process)';
  renderDrain(h);
  const names = classNames(h.sent || {});
  const step = h.step_seconds || 1;
  const rate = names.map((name) => ({ name, values: h.sent[name].map((v) => v / step) }));
  const refs = [{ label: `target ${fmtRate(h.limits.target_rps)}`, value: h.limits.target_rps, cls: 'target' }];
  for (const [name, v] of Object.entries(h.limits.class_max_rps || {})) refs.push({ label: `${name} cap ${fmtRate(v)}`, value: v, cls: `s-${name}` });
  drawChart($('chart-rate'), h, { series: rate, refs, unit: '/s' });
  $('now-rate').textContent = 'Last step: ' + rate.map((s) => `${s.name} ${fmtRate(lastValue(s.values))}`).join(' · ');
  const backlog = names.map((name) => ({ name, values: h.queued[name] }));
  drawChart($('chart-backlog'), h, { series: backlog });
  $('now-backlog').textContent = 'Last step: ' + backlog.map((s) => `${s.name} ${fmtInt(lastValue(s.values))}`).join(' · ');
  drawChart($('chart-throttled'), h, { series: [{ name: 'throttled', values: h.throttled }], bars: true });
  const total429 = h.throttled.reduce((a, v) => a + v, 0);
  $('now-throttled').textContent = `${fmtInt(total429)} in 15 minutes, ${fmtInt(h.throttled.at(-1))} in the last step.`;
}

// renderPartial shows the outage banner when the gateway answered without
// some of its state (stats.unavailable), naming what is missing and why.
// The next whole answer hides it.
function renderPartial(s) {
  const names = missing(s).map((n) => SECTION_NAMES[n] || n);
  const b = $('partial');
  b.hidden = names.length === 0;
  document.body.dataset.partial = String(names.length > 0);
  if (names.length === 0) {
    b.textContent = '';
    return;
  }
  const list = names.length === 1 ? names[0] : `${names.slice(0, -1).join(', ')} and ${names.at(-1)}`;
  const why = s.replica?.mode === 'redis' ? 'Redis unreachable' : 'The gateway could not read its store';
  b.textContent = `${why}: ${list} ${names.length === 1 ? 'is' : 'are'} not shown; this replica's own view below.`;
}

function render() {
  const s = state.stats;
  if (!s) return;
  const now = Date.now();
  const rate = sendRate(s, now);
  renderPartial(s);
  renderTiles(s, now, rate);
  renderQueues(s);
  renderLanes(s);
  renderLimiter(s);
  renderProvider(s, rate);
  renderProtection(s);
  renderReplica(s);
  renderDead(s, state.dead, state.deadErr);
  renderScopes(s);
  const paused = s.pause?.paused === true;
  $('resume').disabled = !paused;
  $('pause-start').textContent = paused ? 'Change the pause…' : 'Pause sending…';
  document.body.dataset.paused = String(paused);
}

function renderFreshness() {
  const now = Date.now();
  const f = $('freshness');
  const parts = [];
  if (state.lastOK) parts.push(`Last updated ${fmtClock(state.lastOK)} (${fmtSecs(Math.floor((now - state.lastOK) / 1000))} ago)`);
  if (state.lastErr) {
    const wait = Math.max(0, Math.ceil((state.nextAt - now) / 1000));
    const what = state.lastStatus && state.lastErr !== `HTTP ${state.lastStatus}`
      ? `the gateway answered ${state.lastStatus}: ${state.lastErr}` : state.lastErr;
    parts.push(`update failed: ${what}; retrying in ${wait} s`);
  }
  f.textContent = parts.length ? parts.join(' — ') : 'Connecting…';
  f.dataset.state = state.lastErr ? 'error' : 'ok';
  const stale = state.lastErr !== '' && (!state.lastOK || now - state.lastOK > STALE_MS);
  document.body.dataset.stale = String(stale);
  const banner = $('stale');
  banner.hidden = !stale;
  if (stale) banner.textContent = staleText(state.lastOK, state.lastStatus, state.lastErr);
}

// staleText is the stale banner. A gateway that answered with an error (a
// 503: it runs, but a dependency such as Redis is down or slow) is told
// apart from one that did not answer at all (down, unreachable, timed out).
function staleText(lastOK, status, why) {
  if (!status) {
    return lastOK ? `STALE: no answer from the gateway since ${fmtClock(lastOK)}. The figures below are old.`
      : 'No answer from the gateway yet.';
  }
  // A problem without detail or title leaves only the status to give.
  const detail = why && why !== `HTTP ${status}` ? `: ${why.replace(/\.$/, '')}` : '';
  const answered = `the gateway answered ${status}${detail}.`;
  return lastOK ? `STALE: ${answered} No new figures since ${fmtClock(lastOK)}; the ones below are old.`
    : `No figures yet: ${answered}`;
}

// ---- polling ---------------------------------------------------------

async function poll() {
  clearTimeout(state.timer);
  state.timer = 0;
  const session = state.session;
  if (state.inflight === session) {
    state.again = true;
    return;
  }
  state.inflight = session;
  let delay = POLL_MS;
  try {
    // Only the stats fail the poll: dead letters or a history that cannot
    // be read are shown as such beside the rest (with Redis down the stats
    // still answer with this replica's view; the dead letters do not).
    const history = Date.now() - state.historyAt < HISTORY_MS ? null : api('GET', 'history');
    const usage = Date.now() - state.usageAt < USAGE_MS ? null : api('GET', 'usage');
    const [stats, dead, hist, used] = await Promise.allSettled([api('GET', 'stats'), api('GET', `dead-letters?limit=${DEAD_LIMIT}`), history, usage]);
    const refused = [stats, dead, hist, used].find((r) => r.status === 'rejected' && r.reason instanceof AuthError);
    if (refused) throw refused.reason;
    if (stats.status === 'rejected') throw stats.reason;
    if (session !== state.session) return;
    state.stats = stats.value;
    state.dead = dead.status === 'fulfilled' ? dead.value : null;
    state.deadErr = dead.status === 'fulfilled' ? '' : dead.reason.message;
    if (hist.status === 'rejected') {
      state.historyErr = hist.reason.message;
    } else if (hist.value) {
      Object.assign(state, { history: hist.value, historyAt: Date.now(), historyErr: '' });
    }
    if (history) renderHistory();
    if (used.status === 'rejected') {
      state.usageErr = used.reason.message;
    } else if (used.value) {
      Object.assign(state, { usage: used.value, usageAt: Date.now(), usageErr: '' });
    }
    if (usage) renderUsage();
    state.lastOK = Date.now();
    state.lastErr = '';
    state.lastStatus = 0;
    state.failures = 0;
    render();
  } catch (e) {
    if (session !== state.session) return;
    if (e instanceof AuthError) {
      signOut(`The gateway refused the key: ${e.message}`);
      return;
    }
    state.failures++;
    state.lastErr = e.message;
    state.lastStatus = e instanceof APIError ? e.status : 0;
    delay = Math.min(MAX_BACKOFF_MS, POLL_MS * 2 ** state.failures);
  } finally {
    if (state.inflight === session) state.inflight = -1;
  }
  if (state.again) {
    state.again = false;
    delay = 0;
  }
  state.nextAt = Date.now() + delay;
  state.timer = setTimeout(poll, delay);
  renderFreshness();
}

// act runs one admin action, reports it, and refreshes at once.
async function act(button, path, body, done) {
  const msg = $('action-msg');
  button.disabled = true;
  msg.dataset.state = 'busy';
  msg.textContent = 'Working…';
  try {
    await api('POST', path, body);
    msg.dataset.state = 'ok';
    msg.textContent = `${done} (${fmtClock(Date.now())})`;
    return true;
  } catch (e) {
    if (e instanceof AuthError) {
      signOut(`The gateway refused the key: ${e.message}`);
      return false;
    }
    msg.dataset.state = 'error';
    msg.textContent = `Failed: ${e.message}`;
    return false;
  } finally {
    button.disabled = false;
    poll();
  }
}

// ---- message lookup --------------------------------------------------

async function lookup(id) {
  const msg = $('lookup-msg');
  const out = $('lookup-result');
  const session = state.session;
  out.hidden = true;
  if (!MESSAGE_ID.test(id)) {
    msg.dataset.state = 'error';
    msg.textContent = 'A message id is msg_ followed by 26 characters (0-9, A-Z without I, L, O, U).';
    return;
  }
  msg.dataset.state = 'busy';
  msg.textContent = 'Looking up…';
  let m;
  try {
    m = await api('GET', `messages/${encodeURIComponent(id)}`);
  } catch (e) {
    if (session !== state.session) return;
    if (e instanceof AuthError) {
      signOut(`The gateway refused the key: ${e.message}`);
      return;
    }
    msg.dataset.state = 'error';
    msg.textContent = `${id}: ${e.message}`;
    return;
  }
  if (session !== state.session) return;
  msg.dataset.state = 'ok';
  msg.textContent = `${id} (${fmtClock(Date.now())})`;
  const facts = [
    ['status', 'Status', m.status], ['class', 'Class', m.class], ['to', 'To', m.to],
    ['producer', 'Producer', m.producer], ['attempts', 'Attempts', fmtInt(m.attempts)],
    ['segments', 'Segments', fmtInt(m.segments)], ['created', 'Created', fmtDateTime(m.created_at)],
    ['sent', 'Sent', m.sent_at ? fmtDateTime(m.sent_at) : '—'], ['reference', 'Reference', m.reference],
    ['provider-id', 'Provider id', m.provider_message_id], ['last-error', 'Last error', m.last_error],
  ];
  out.replaceChildren(...facts.map(([field, label, v]) => el('div', {},
    el('dt', {}, label), el('dd', { data: { field } }, v === undefined || v === '' ? '—' : v))));
  out.hidden = false;
}

// ---- session ---------------------------------------------------------

function resetState() {
  clearTimeout(state.timer);
  Object.assign(state, {
    stats: null, dead: null, deadErr: '', deadSig: '', lastOK: 0, lastErr: '', lastStatus: 0, failures: 0, nextAt: 0, timer: 0,
    again: false, prevSent: null, rate: null, otp503: null, inflight: -1, history: null, historyAt: 0, historyErr: '',
    usage: null, usageAt: 0, usageErr: '',
  });
  document.querySelector('#usage tbody').replaceChildren();
  $('usage-msg').textContent = '';
  for (const id of ['chart-rate', 'chart-backlog', 'chart-throttled', 'drain-classes']) $(id).replaceChildren();
  for (const id of ['now-rate', 'now-backlog', 'now-throttled', 'history-msg', 'history-scope']) $(id).textContent = '';
  $('drain').textContent = '—';
  $('replica').hidden = true;
  $('partial').hidden = true;
  document.body.dataset.partial = 'false';
  $('lookup-result').hidden = true;
  $('lookup-result').replaceChildren();
  $('lookup-msg').textContent = '';
  state.session++;
}

function signIn() {
  resetState();
  $('login').hidden = true;
  $('main').hidden = false;
  $('signout').hidden = false;
  $('key-error').hidden = true;
  $('action-msg').textContent = '';
  renderFreshness();
  poll();
}

function signOut(why) {
  clearKey();
  resetState();
  $('main').hidden = true;
  $('signout').hidden = true;
  $('login').hidden = false;
  $('freshness').textContent = 'Not connected';
  $('freshness').dataset.state = 'ok';
  $('stale').hidden = true;
  document.body.dataset.stale = 'false';
  document.title = 'smsgw ops';
  const err = $('key-error');
  err.hidden = !why;
  err.textContent = why || '';
  $('key-input').focus();
}

function init() {
  $('key-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const input = $('key-input');
    const key = input.value.trim();
    input.value = '';
    if (!key) return;
    setKey(key);
    signIn();
  });
  $('signout').addEventListener('click', () => signOut(''));

  const form = $('pause-form');
  $('pause-start').addEventListener('click', () => {
    form.hidden = false;
    $('pause-reason').focus();
  });
  $('pause-cancel').addEventListener('click', () => {
    form.hidden = true;
    $('pause-start').focus();
  });
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const body = {};
    const reason = $('pause-reason').value.trim();
    const secs = Number($('pause-duration').value);
    const scope = $('pause-scope').value;
    let what = 'Sending';
    if (scope.startsWith('class:')) {
      body.class = scope.slice('class:'.length);
      what = `Class ${body.class}`;
    } else if (scope === 'producer') {
      body.producer = $('pause-producer').value.trim();
      what = `Producer ${body.producer}`;
    }
    if (reason) body.reason = reason;
    if (secs > 0) body.duration_seconds = secs;
    if (await act($('pause-confirm'), 'pause', body, `${what} paused on every replica.`)) {
      form.hidden = true;
      $('pause-reason').value = '';
      $('pause-producer').value = '';
      $('pause-scope').value = '';
      $('pause-producer-field').hidden = true;
    }
  });
  $('pause-scope').addEventListener('change', () => {
    $('pause-producer-field').hidden = $('pause-scope').value !== 'producer';
  });
  $('resume').addEventListener('click', () => act($('resume'), 'resume', undefined, 'Sending resumed.'));
  $('lookup-form').addEventListener('submit', (e) => {
    e.preventDefault();
    lookup($('lookup-id').value.trim());
  });

  // The charts are drawn at the width they have: redraw when it changes.
  let width = 0;
  addEventListener('resize', () => {
    const w = $('chart-rate').clientWidth;
    if (w !== width) {
      width = w;
      renderHistory();
    }
  });
  for (const [id, title] of [['chart-rate', 'Sent per second by class, last 15 minutes'],
    ['chart-backlog', 'Backlog due now by class, last 15 minutes'], ['chart-throttled', 'Provider 429s per step, last 15 minutes']]) {
    $(id).dataset.title = title;
  }

  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && getKey()) poll();
  });
  setInterval(() => {
    if (getKey()) renderFreshness();
  }, 1000);

  if (getKey()) signIn();
  else signOut('');
}

init();
