/**
 * The lab page: one self-contained HTML document (no file or script fetched but the lab's own
 * state) that asks `state` every second and draws each board as a row: its state, who holds it
 * and the seconds left, why it is out of the lab, its last checks, its tests' outcomes over its
 * last runs (board-suspect: failed there, passed on another board). With the admin key typed in
 * (kept in the tab's sessionStorage only), a row offers `online` and `release`. Everything from
 * the store is put in as text, never as markup.
 */

/** How often the page asks for the lab's state. */
export const PAGE_REFRESH_MS = 1000;

const STYLE = `
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .3em; }
#meta, #watch { color: #555; margin: .2em 0; }
table { border-collapse: collapse; margin-top: 1em; width: 100%; }
th, td { text-align: left; padding: .35em .6em; border-bottom: 1px solid #ddd; vertical-align: top; }
tr[data-state=free] .state { color: #1a7f37; }
tr[data-state=leased] .state { color: #0550ae; }
tr[data-state=offline] .state, tr[data-state=quarantined] .state { color: #cf222e; font-weight: bold; }
.check.fail { color: #cf222e; }
.results .suspect { color: #cf222e; }
.small { color: #666; font-size: .9em; }
#admin { margin-top: 1em; }
#message { margin-left: 1em; }
#stale { color: #cf222e; }
ol#log { font-family: monospace; font-size: .85em; color: #444; }
`;

const SCRIPT = `
const REFRESH = ${PAGE_REFRESH_MS};
const el = (tag, attrs, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
};
const iso = (ms) => new Date(ms).toISOString().replace(/\\.\\d+Z$/, 'Z');
const ago = (now, at) => { const s = Math.max(0, Math.round((now - at) / 1000)); return s < 120 ? s + ' s' : s < 7200 ? Math.round(s / 60) + ' min' : Math.round(s / 3600) + ' h'; };
const key = () => sessionStorage.getItem('fleetlab-lab-admin') || '';

async function act(action, board) {
  const msg = document.getElementById('message');
  const r = await fetch('api/boards/' + encodeURIComponent(board) + '/' + action, { method: 'POST', headers: { authorization: 'Bearer ' + key() } });
  const body = await r.json().catch(() => ({}));
  msg.textContent = r.ok ? body.message : 'refused (' + r.status + '): ' + body.message;
  msg.dataset.ok = String(r.ok);
  refresh();
}

function row(view, b) {
  let holder = '', detail = '';
  if (b.lease) { holder = b.lease.holder; detail = b.lease.leftSeconds + ' s left (until ' + iso(b.lease.until) + ', renewed while it runs)'; }
  if (b.out) { holder = b.out.by; detail = b.out.reason + ' (since ' + iso(b.out.since) + ')'; }
  const last = b.checks[0];
  const check = !view.checksOn ? '' : last ? (last.ok ? 'passed' : 'failed at ' + (last.failedStep || '?')) + ', ' + ago(view.now, last.at) + ' ago' : 'never checked';
  const history = b.checks.map((c) => (c.ok ? '+' : '-')).join('');
  const r = b.results;
  const results = el('td', { class: 'results' });
  if (r.runs === 0) results.append('no runs recorded');
  else results.append(r.passed + ' passed, ' + r.deviceFailures + ' device, ' + r.infrastructureFailures + ' infrastructure, ',
    el('span', { class: r.boardSuspect ? 'suspect' : '' }, r.boardSuspect + ' board-suspect'),
    el('div', { class: 'small' }, 'last ' + r.runs + ' run' + (r.runs === 1 ? '' : 's')));
  const actions = el('td', { class: 'actions' });
  if (key() && view.admin) {
    if (b.state === 'offline' || b.state === 'quarantined') actions.append(el('button', { 'data-action': 'online', 'data-board': b.name }, 'online'));
    if (b.state === 'leased') actions.append(el('button', { 'data-action': 'release', 'data-board': b.name }, 'release'));
  }
  return el('tr', { 'data-board': b.name, 'data-state': b.state },
    el('td', { class: 'name' }, b.name, el('div', { class: 'small' }, '[' + b.tags.join(', ') + '] ' + b.address)),
    el('td', { class: 'state' }, b.state),
    el('td', { class: 'holder' }, holder),
    el('td', { class: 'detail' }, detail),
    el('td', { class: 'check' + (last && !last.ok ? ' fail' : ''), title: last && last.reason ? last.reason : '' }, check, history ? el('div', { class: 'small' }, history) : ''),
    results,
    actions);
}

function draw(view) {
  document.getElementById('meta').textContent = view.source + ': ' + view.boards.length + ' board(s), leases in ' + view.store + ' (time to live ' + view.ttlSeconds + ' s), as of ' + iso(view.now);
  document.getElementById('watch').textContent = !view.checksOn ? 'health checks off (no "health" section in the lab file)' : view.watch ? 'lab watch: ' + view.watch.holder : 'lab watch: not running';
  const body = document.getElementById('boards');
  body.replaceChildren(...view.boards.map((b) => row(view, b)));
  document.getElementById('log').replaceChildren(...view.log.map((e) => el('li', {}, iso(e.at) + '  ' + e.board + '  ' + e.event + '  ' + e.holder + (e.detail ? '  (' + e.detail + ')' : ''))));
  document.getElementById('admin').hidden = !view.admin;
}

async function refresh() {
  try {
    const r = await fetch('api/state', { cache: 'no-store' });
    if (!r.ok) throw new Error('state answered ' + r.status);
    draw(await r.json());
    document.getElementById('stale').textContent = '';
  } catch (err) {
    // The page keeps what it last drew and says it is stale; the next tick tries again.
    document.getElementById('stale').textContent = 'not updating: ' + err.message;
  }
}

document.getElementById('boards').addEventListener('click', (ev) => {
  const b = ev.target.closest('button[data-action]');
  if (b) act(b.dataset.action, b.dataset.board);
});
document.getElementById('key-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  sessionStorage.setItem('fleetlab-lab-admin', document.getElementById('admin-key').value);
  document.getElementById('admin-key').value = '';
  refresh();
});
refresh();
setInterval(refresh, REFRESH);
`;

/** The page's HTML; it reads its data from `api/state` beside it. */
export function renderLabPage(): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>fleetlab lab</title>
<style>${STYLE}</style>
</head>
<body>
<h1>fleetlab lab</h1>
<p id="meta">loading...</p>
<p id="watch"></p>
<p id="stale"></p>
<table>
<thead><tr><th>board</th><th>state</th><th>holder / marked by</th><th>lease or reason</th><th>last check</th><th>tests (last runs)</th><th></th></tr></thead>
<tbody id="boards"></tbody>
</table>
<div id="admin" hidden><form id="key-form">admin key: <input id="admin-key" type="password" autocomplete="off"> <button type="submit">use</button><span id="message"></span></form></div>
<h2>latest lease events</h2>
<ol id="log"></ol>
<script>${SCRIPT}</script>
</body>
</html>
`;
}
