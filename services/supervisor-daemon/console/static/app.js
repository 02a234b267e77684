// Hero console: plain ES module, no build step, no external requests.
// Routes live in the URL fragment: #/login, #/, #/c/<ctx>/<page>[/<id>].

import {queuesPage, schedulesPage} from './queues.js';

export {h, shell, main, api, call, can, actionButton, badge, follow, closers};

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
const toastBox = document.getElementById('toast');

let me = null;         // /ui/api/me
let closers = [];      // what the current page opened (event sources)

// h builds an element: h('a', {href: '#'}, 'text', child...).
function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, v);
  }
  for (const k of kids.flat()) {
    if (k === null || k === undefined || k === false) continue;
    el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return el;
}

function toast(msg, err = false) {
  const p = h('p', {class: err ? 'err' : ''}, msg);
  toastBox.append(p);
  setTimeout(() => p.remove(), 6000);
}

class HTTPError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

async function api(path, opts = {}) {
  const headers = {'Accept': 'application/json'};
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  if (me && me.csrf) headers['X-CSRF-Token'] = me.csrf;
  const r = await fetch('/ui/api/' + path, {method: opts.method || 'GET', headers, credentials: 'same-origin',
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body)});
  let data = {};
  try { data = await r.json(); } catch (_) { /* empty */ }
  if (!r.ok) {
    if (r.status === 401 && !path.startsWith('login')) { me = null; location.hash = '#/login'; }
    throw new HTTPError(r.status, data.error || r.statusText);
  }
  return data;
}

const call = (method, params) => api('call', {method: 'POST', body: {method, params}}).then(d => d.result);

function role(ctx) {
  const c = me && me.contexts.find(x => x.id === ctx);
  return c ? c.role : 'none';
}
const rank = {none: 0, reader: 1, executor: 2, admin: 3};
const can = (ctx, need) => me && !me.read_only && rank[role(ctx)] >= rank[need];

const fmtTime = s => s ? new Date(s * 1000).toISOString().replace('T', ' ').slice(0, 19) : '';
const badge = st => h('span', {class: 'badge st-' + st}, st || '—');

// ---------- sign-in ----------

function hexToBytes(hex) {
  const clean = hex.trim().toLowerCase();
  if (!/^([0-9a-f]{2})+$/.test(clean)) throw new Error('the key is not hex');
  return Uint8Array.from(clean.match(/../g).map(b => parseInt(b, 16)));
}
const bytesToHex = b => Array.from(new Uint8Array(b), x => x.toString(16).padStart(2, '0')).join('');

// pkcs8Of reads a key as heroctl keeps it (PKCS#8 PEM, <config dir>/keys/actor-N.pem)
// or as hex (the 32-byte seed, or the 64-byte key whose first half is the seed).
function pkcs8Of(key) {
  const pem = key.match(/-----BEGIN PRIVATE KEY-----([A-Za-z0-9+/=\s]+)-----END PRIVATE KEY-----/);
  if (pem) return Uint8Array.from(atob(pem[1].replace(/\s+/g, '')), c => c.charCodeAt(0));
  let seed = hexToBytes(key);
  if (seed.length === 64) seed = seed.slice(0, 32);
  if (seed.length !== 32) throw new Error('an Ed25519 private key is a PKCS#8 PEM file, or 32 bytes (64 hex characters)');
  return new Uint8Array([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20, ...seed]);
}

// signChallenge signs the challenge in the browser (WebCrypto): the key never leaves
// the page.
async function signChallenge(keyText, challenge) {
  const pkcs8 = pkcs8Of(keyText);
  const key = await crypto.subtle.importKey('pkcs8', pkcs8, {name: 'Ed25519'}, false, ['sign']);
  return bytesToHex(await crypto.subtle.sign({name: 'Ed25519'}, key, new TextEncoder().encode(challenge)));
}

function loginPage() {
  nav.replaceChildren();
  who.replaceChildren();
  const msg = h('p', {id: 'login-error', class: 'err', role: 'alert'});
  const actorForm = h('form', {id: 'actor-login', onsubmit: async e => {
    e.preventDefault();
    msg.textContent = '';
    const fd = new FormData(actorForm);
    try {
      const {challenge} = await api('challenge');
      const signature = await signChallenge(fd.get('key'), challenge);
      actorForm.reset();
      await api('login', {method: 'POST', body: {actor: Number(fd.get('actor')), challenge, signature}});
      await start();
    } catch (err) { msg.textContent = err.message; }
  }},
  h('label', {}, 'Actor id', h('input', {name: 'actor', id: 'actor-id', inputmode: 'numeric', required: true, autocomplete: 'username'})),
  h('label', {}, 'Private key (PEM or hex; it stays in this browser)', h('input', {name: 'key', id: 'actor-key', type: 'password', required: true, autocomplete: 'off'})),
  h('label', {}, 'or its file (actor-N.pem)', h('input', {type: 'file', id: 'actor-key-file', accept: '.pem', onchange: async e => {
    const f = e.target.files[0];
    if (f) actorForm.elements.key.value = (await f.text()).replace(/\n/g, ' ');
    e.target.value = '';
  }})),
  h('button', {class: 'primary', type: 'submit', id: 'actor-submit'}, 'Sign in'));
  const opForm = h('form', {id: 'operator-login', onsubmit: async e => {
    e.preventDefault();
    msg.textContent = '';
    const secret = new FormData(opForm).get('secret');
    opForm.reset();
    try {
      await api('login', {method: 'POST', body: {secret}});
      await start();
    } catch (err) { msg.textContent = err.message; }
  }},
  h('label', {}, 'Operator secret', h('input', {name: 'secret', id: 'operator-secret', type: 'password', required: true, autocomplete: 'off'})),
  h('button', {class: 'primary', type: 'submit', id: 'operator-submit'}, 'Sign in'));
  main.replaceChildren(h('h1', {}, 'Sign in'),
    h('section', {class: 'loginbox'}, h('h2', {}, 'As an actor'),
      h('p', {class: 'note'}, 'The browser signs a one-time challenge with your Ed25519 key (WebCrypto); the key is not sent.'), actorForm),
    h('section', {class: 'loginbox'}, h('h2', {}, 'As an operator'), opForm), msg);
}

// ---------- shell ----------

const pages = [['flows', 'Flows'], ['jobs', 'Jobs'], ['queues', 'Queues'], ['schedules', 'Schedules'], ['runners', 'Runners'], ['dlq', 'DLQ'], ['events', 'Events'], ['submit', 'Submit']];

function shell(ctx, page) {
  nav.replaceChildren();
  if (ctx) {
    nav.append(h('span', {}, `Context ${ctx} (${role(ctx)})`));
    for (const [p, label] of pages) {
      if (p === 'submit' && !can(ctx, 'admin')) continue;
      nav.append(h('a', {href: `#/c/${ctx}/${p}`, 'aria-current': p === page ? 'page' : null}, label));
    }
  }
  who.replaceChildren(h('span', {id: 'whoami'}, me.name + (me.read_only ? ' · read-only' : '')),
    h('button', {id: 'logout', onclick: async () => { await api('logout', {method: 'POST', body: {}}); me = null; location.hash = '#/login'; }}, 'Sign out'));
}

function contextsPage() {
  shell(0, '');
  const rows = me.contexts.map(c => h('tr', {}, h('td', {}, h('a', {href: `#/c/${c.id}/flows`}, `Context ${c.id}`)), h('td', {}, c.role)));
  main.replaceChildren(h('h1', {}, 'Contexts'),
    me.contexts.length ? h('div', {class: 'table-wrap'}, h('table', {id: 'contexts'}, h('thead', {}, h('tr', {}, h('th', {}, 'Context'), h('th', {}, 'Your role'))), h('tbody', {}, rows)))
      : h('p', {}, 'You are not a member of any context.'));
}

// ---------- lists ----------

const statuses = {
  flows: ['', 'created', 'dispatched', 'started', 'finished', 'error'],
  jobs: ['', 'created', 'dispatched', 'waiting_for_prerequisites', 'started', 'finished', 'error'],
};

function filterForm(kind, q, onchange) {
  const f = h('form', {class: 'filters', id: 'filters', onsubmit: e => { e.preventDefault(); onchange(Object.fromEntries(new FormData(f))); }});
  if (statuses[kind]) {
    f.append(h('label', {}, 'Status', h('select', {name: 'status', id: 'f-status'}, statuses[kind].map(s => h('option', {value: s, selected: q.status === s}, s || 'any')))));
    f.append(h('label', {}, h('span', {}, 'Failed only'), h('input', {type: 'checkbox', name: 'failed', id: 'f-failed', checked: q.status === 'error',
      onchange: e => { f.elements.status.value = e.target.checked ? 'error' : ''; }})));
    f.append(h('label', {}, 'Script type', h('select', {name: 'script_type', id: 'f-script'}, ['', 'sh', 'bash', 'python', 'v', 'osis', 'heroscript', 'rhai', 'handler'].map(s => h('option', {value: s, selected: q.script_type === s}, s || 'any')))));
    f.append(h('label', {}, 'Executor', h('input', {name: 'executor', id: 'f-executor', value: q.executor || '', size: 10})));
    f.append(h('label', {}, 'Since', h('input', {type: 'datetime-local', name: 'since', id: 'f-since', value: q.since || ''})));
    f.append(h('label', {}, 'Until', h('input', {type: 'datetime-local', name: 'until', id: 'f-until', value: q.until || ''})));
  }
  f.append(h('label', {}, 'Search', h('input', {type: 'search', name: 'text', id: 'f-text', value: q.text || '', size: 12})));
  f.append(h('button', {type: 'submit', id: 'f-apply'}, 'Apply'));
  return f;
}

function queryOf(ctx, kind, q, cursor) {
  const p = new URLSearchParams({kind, context_id: ctx, limit: 50});
  for (const k of ['status', 'script_type', 'executor', 'text']) if (q[k]) p.set(k, q[k]);
  for (const k of ['since', 'until']) if (q[k]) p.set(k, Math.floor(new Date(q[k]).getTime() / 1000));
  if (cursor) p.set('cursor', cursor);
  return p;
}

function bulkBody(ctx, q) {
  const b = {context_id: ctx};
  for (const k of ['status', 'script_type', 'executor', 'text']) if (q[k]) b[k] = q[k];
  for (const k of ['since', 'until']) if (q[k]) b[k] = Math.floor(new Date(q[k]).getTime() / 1000);
  return b;
}

// bulkBar offers the actions over everything the filter matches: a first press
// counts, a second acts.
function bulkBar(ctx, q, actions, reload) {
  const bar = h('div', {class: 'actions', id: 'bulk'});
  for (const [action, label, need] of actions) {
    if (!can(ctx, need)) continue;
    const b = h('button', {class: 'danger', 'data-action': action, id: 'bulk-' + action.replace('.', '-')}, label + ' all matching');
    b.addEventListener('click', async () => {
      try {
        if (!b.dataset.confirm) {
          const r = await api('bulk', {method: 'POST', body: {...bulkBody(ctx, q), action, dry_run: true}});
          b.dataset.confirm = '1';
          b.textContent = `Confirm: ${label.toLowerCase()} ${r.matched}`;
          return;
        }
        const r = await api('bulk', {method: 'POST', body: {...bulkBody(ctx, q), action}});
        toast(`${action}: ${r.done} of ${r.matched} done` + (r.failed.length ? `; ${r.failed.length} refused: ${r.failed[0].error}` : ''), r.failed.length > 0);
        const out = document.getElementById('bulk-result') || bar.appendChild(h('span', {id: 'bulk-result', role: 'status'}));
        out.textContent = `${action}: ${r.done} of ${r.matched} done`;
        reload();
      } catch (err) { toast(err.message, true); }
    });
    bar.append(b);
  }
  return bar.children.length ? bar : null;
}

function actionButton(label, cls, fn) {
  return h('button', {class: cls, onclick: async e => {
    e.target.disabled = true;
    try { await fn(); } catch (err) { toast(err.message, true); }
    e.target.disabled = false;
  }}, label);
}

async function listPage(ctx, kind, q) {
  shell(ctx, kind);
  const title = {flows: 'Flows', jobs: 'Jobs', dlq: 'Dead-letter queue', runners: 'Runners'}[kind];
  const tbody = h('tbody');
  const more = h('button', {id: 'more', hidden: true}, 'More');
  const count = h('span', {id: 'count', role: 'status'});
  let cursor = '';
  let shown = 0;
  const rerender = nq => { location.hash = `#/c/${ctx}/${kind}?` + new URLSearchParams(Object.entries(nq).filter(([, v]) => v)).toString(); };
  const load = async reset => {
    if (reset) { tbody.replaceChildren(); cursor = ''; shown = 0; }
    try {
      const d = await api('list?' + queryOf(ctx, kind, q, cursor));
      for (const it of d.items) tbody.append(rowOf(ctx, kind, it, () => load(true)));
      shown += d.items.length;
      cursor = d.next_cursor;
      more.hidden = !cursor;
      count.textContent = `${shown} shown` + (cursor ? ' (more)' : '');
    } catch (err) { count.textContent = err.message; count.className = 'err'; }
  };
  more.addEventListener('click', () => load(false));
  const heads = {flows: ['Flow', 'Status', 'Jobs', 'Created', 'Error', ''], jobs: ['Job', 'Status', 'Type', 'Flow', 'Created', 'Error', ''],
    dlq: ['Job', 'Flow', 'Error', 'Attempt', 'When', ''], runners: ['Runner', 'Script types', 'Executors', 'Live processes (last heartbeat)', '']}[kind];
  const bulk = {flows: [['flow.cancel', 'Cancel', 'executor'], ['flow.retry', 'Retry', 'executor'], ['flow.delete', 'Delete', 'admin']],
    jobs: [['job.stop', 'Stop', 'executor']], dlq: [['dlq.requeue', 'Requeue', 'executor'], ['dlq.purge', 'Purge', 'admin']], runners: []}[kind];
  main.replaceChildren(h('h1', {}, `${title} · context ${ctx}`), kind !== 'runners' ? filterForm(kind, q, rerender) : null,
    bulkBar(ctx, q, bulk, () => load(true)), h('div', {class: 'table-wrap'}, h('table', {id: kind + '-table'}, h('thead', {}, h('tr', {}, heads.map(x => h('th', {}, x)))), tbody)),
    h('div', {class: 'pager'}, more, count));
  await load(true);
}

function rowOf(ctx, kind, it, reload) {
  const acts = h('td', {class: 'row-actions'});
  const add = (need, label, cls, fn) => { if (can(ctx, need)) acts.append(actionButton(label, cls, async () => { await fn(); reload(); })); };
  switch (kind) {
    case 'flows':
      if (it.status === 'started' || it.status === 'dispatched') add('executor', 'Cancel', 'danger', () => call('flow.cancel', {context_id: ctx, id: it.id}));
      if (it.status === 'error') add('executor', 'Retry', '', () => call('flow.retry', {context_id: ctx, id: it.id}));
      if (it.status === 'finished' || it.status === 'error') add('admin', 'Delete', 'danger', () => call('flow.delete', {context_id: ctx, id: it.id}));
      return h('tr', {'data-id': it.id}, h('td', {}, h('a', {href: `#/c/${ctx}/flow/${it.id}`}, `flow ${it.id}`)), h('td', {}, badge(it.status)),
        h('td', {}, (it.jobs || []).length), h('td', {}, fmtTime(it.created_at)), h('td', {}, it.error || ''), acts);
    case 'jobs':
      if (it.status === 'started' || it.status === 'dispatched') add('executor', 'Stop', 'danger', () => call('job.stop', {context_id: ctx, caller_id: it.caller_id, id: it.id}));
      return h('tr', {'data-id': it.id}, h('td', {}, h('a', {href: `#/c/${ctx}/job/${it.caller_id}/${it.id}`}, `job ${it.id}`)), h('td', {}, badge(it.status)),
        h('td', {}, it.function_name || it.script_type), h('td', {}, it.flow_id ? h('a', {href: `#/c/${ctx}/flow/${it.flow_id}`}, it.flow_id) : ''),
        h('td', {}, fmtTime(it.created_at)), h('td', {}, it.error || ''), acts);
    case 'dlq':
      add('executor', 'Requeue', '', () => call('dlq.requeue', {context_id: ctx, caller_id: it.caller_id, id: it.id}));
      add('admin', 'Purge', 'danger', () => call('dlq.purge', {context_id: ctx, caller_id: it.caller_id, id: it.id}));
      return h('tr', {'data-id': it.id}, h('td', {}, h('a', {href: `#/c/${ctx}/job/${it.caller_id}/${it.id}`}, `job ${it.id}`)), h('td', {}, it.flow_id || ''),
        h('td', {}, it.error || ''), h('td', {}, it.attempt || 0), h('td', {}, it.dlq_at_ms ? fmtTime(it.dlq_at_ms / 1000) : ''), acts);
    default:
      return h('tr', {'data-id': it.id}, h('td', {}, `runner ${it.id}` + (it.local ? ' (local)' : '')), h('td', {}, (it.script_types || []).join(', ')),
        h('td', {}, (it.executors || []).join(', ') || '—'),
        h('td', {}, (it.processes || []).map(p => `${p.id} (${Math.max(0, Math.round((Date.now() - p.last_heartbeat_ms) / 1000))} s ago)`).join(', ') || '—'), acts);
  }
}

// ---------- a flow ----------

// eventStatus is a node's state after an event of its job.
const eventStatus = {'job.dispatched': 'dispatched', 'job.started': 'running', 'job.finished': 'completed', 'job.failed': 'failed',
  'job.cancelled': 'cancelled', 'job.retried': 'ready', 'job.requeued': 'ready', 'job.dead_lettered': 'failed'};

// flowEventStatus is a flow's status after an event of it.
const flowEventStatus = {'flow.started': 'started', 'flow.finished': 'finished', 'flow.error': 'error'};

function follow(ctx, flow, onEvent) {
  const p = new URLSearchParams({context_id: ctx});
  if (flow) p.set('flow_id', flow);
  const es = new EventSource('/ui/api/events?' + p);
  es.addEventListener('ev', e => onEvent(JSON.parse(e.data)));
  es.addEventListener('end', e => {
    const why = JSON.parse(e.data).error;
    document.body.dataset.liveEnded = why;
    toast('live updates ended: ' + why, true);
    es.close();
  });
  closers.push(() => es.close());
  return es;
}

async function flowPage(ctx, id) {
  shell(ctx, 'flows');
  const dagBox = h('div', {id: 'dag', 'aria-label': 'the flow\'s jobs as a graph'});
  const info = h('dl', {class: 'kv', id: 'flow-info'});
  const panel = h('section', {id: 'job-panel', 'aria-live': 'polite'}, h('p', {class: 'note'}, 'Select a job in the graph (click, or Tab and Enter).'));
  const acts = h('div', {class: 'actions', id: 'flow-actions'});
  const status = h('span', {id: 'flow-status'});
  main.replaceChildren(h('h1', {}, `Flow ${id} `, status), acts, h('div', {class: 'cols'}, h('div', {}, dagBox, info), panel));
  let view = null;
  const setNode = (jid, st) => {
    if (!view || !view.nodes[jid]) return;
    view.nodes[jid].status = st;
    const g = view.nodes[jid].group;
    if (g) return groupLabel(g);
    const el = document.getElementById('n-j' + jid);
    if (!el) return;
    el.setAttribute('class', 'node st-' + st);
    el.dataset.status = st;
    const texts = el.querySelectorAll('text');
    if (texts.length) texts[texts.length - 1].textContent = st;
    el.setAttribute('aria-label', `job ${jid}: ${st}`);
  };
  const groupLabel = g => {
    const el = document.getElementById('n-' + g);
    if (!el) return;
    const counts = {};
    for (const jid of view.groups[g]) { const st = view.nodes[jid].status; counts[st] = (counts[st] || 0) + 1; }
    const parts = Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(', ');
    const texts = el.querySelectorAll('text');
    if (texts.length) texts[texts.length - 1].textContent = parts;
    el.dataset.counts = parts;
    el.setAttribute('aria-label', `${view.groups[g].length} jobs: ${parts}`);
  };
  let shown = '';
  const renderFlow = f => {
    info.replaceChildren(...[['Status', f.status], ['Jobs', (f.jobs || []).length], ['Created', fmtTime(f.created_at)], ['Error', f.error || '—'],
      ['Result', Object.entries(f.result || {}).map(([k, v]) => `${k}=${v}`).join(', ') || '—']].flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
    // The state and its actions are drawn again only when they change: a reload must
    // not swap a button under the user's (or a test's) click.
    if (shown === `${f.status} ${!!f.paused}`) return;
    shown = `${f.status} ${!!f.paused}`;
    status.replaceChildren(...[badge(f.status), f.paused ? h('span', {class: 'badge st-paused', id: 'flow-paused'}, 'paused') : null].filter(Boolean));
    status.dataset.status = f.status;
    acts.replaceChildren();
    if ((f.status === 'started' || f.status === 'dispatched') && can(ctx, 'executor')) acts.append(actionButton('Cancel flow', 'danger', () => call('flow.cancel', {context_id: ctx, id}).then(renderFlow)));
    if (f.status === 'started' && !f.paused && can(ctx, 'executor')) acts.append(actionButton('Pause flow', '', () => call('flow.pause', {context_id: ctx, id, note: 'paused from the console'}).then(renderFlow)));
    if (f.paused && can(ctx, 'executor')) acts.append(actionButton('Resume flow', 'primary', () => call('flow.resume', {context_id: ctx, id}).then(renderFlow)));
    if (f.status === 'error' && can(ctx, 'executor')) acts.append(h('span', {}, actionButton('Retry failed steps', 'primary', async () => { renderFlow(await call('flow.retry', {context_id: ctx, id})); })));
    if ((f.status === 'finished' || f.status === 'error') && can(ctx, 'admin')) acts.append(actionButton('Delete flow', 'danger', async () => { await call('flow.delete', {context_id: ctx, id}); location.hash = `#/c/${ctx}/flows`; }));
    for (const b of acts.querySelectorAll('button')) b.id = 'flow-' + b.textContent.split(' ')[0].toLowerCase();
  };
  const load = async () => {
    const d = await api(`dag?context_id=${ctx}&id=${id}`);
    view = d;
    dagBox.innerHTML = d.svg; // Graphviz's SVG of ids, statuses and script types (dag.go)
    for (const g of dagBox.querySelectorAll('g.node')) {
      const nid = g.id.slice(2);
      g.setAttribute('tabindex', '0');
      g.setAttribute('role', 'button');
      const open = () => nid.startsWith('j') ? jobPanel(ctx, view.nodes[nid.slice(1)].caller_id, Number(nid.slice(1)), panel) : groupPanel(ctx, view, nid, panel);
      g.addEventListener('click', open);
      g.addEventListener('keydown', e => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); open(); } });
    }
    for (const [jid, n] of Object.entries(d.nodes)) setNode(jid, n.status);
    renderFlow(d.flow);
  };
  try { await load(); } catch (err) { main.replaceChildren(h('h1', {}, `Flow ${id}`), h('p', {class: 'err', id: 'page-error'}, err.message)); return; }
  // A flow's own change (started, finished, failed, retried): its state again, the
  // layout kept. Changes during a reload make one more reload after it.
  // A node an event changed after the reload asked is left as the event set it: the
  // reload's graph may have been read before that event (a job seen completed shown
  // running again), and the stream brings every change after it in order.
  let reloading = false, again = false, tick = 0;
  const touched = {};
  const reload = () => {
    if (reloading) { again = true; return; }
    reloading = true;
    const asked = tick;
    call('flow.dag', {context_id: ctx, id}).then(d => {
      for (const n of d.nodes) if (!(touched[n.id] > asked)) setNode(n.id, n.node_status || 'pending');
      renderFlow(d.flow);
    }).catch(err => toast(err.message, true)).finally(() => {
      reloading = false;
      if (again) { again = false; reload(); }
    });
  };
  const es = follow(ctx, id, ev => {
    if (ev.job_id && eventStatus[ev.type]) { touched[ev.job_id] = ++tick; setNode(ev.job_id, eventStatus[ev.type]); }
    if (!ev.type.startsWith('flow.')) return;
    const st = flowEventStatus[ev.type];
    if (st) { status.replaceChildren(badge(st)); status.dataset.status = st; } // at once; the reload brings the rest
    reload();
  });
  // The graph was read before the stream opened: what changed in between is read
  // again once it is open (the stream itself starts at its opening, stream.go).
  es.addEventListener('open', reload);
  window.heroLive = (window.heroLive || 0) + 1;
}

function groupPanel(ctx, view, gid, panel) {
  const ids = view.groups[gid.replace(/^n-/, '')] || view.groups[gid];
  panel.replaceChildren(h('h2', {}, `${ids.length} parallel jobs`), h('ul', {class: 'feed'}, ids.slice(0, 200).map(jid =>
    h('li', {}, h('a', {href: `#/c/${ctx}/job/${view.nodes[jid].caller_id}/${jid}`}, `job ${jid}`), ' ', badge(view.nodes[jid].status)))),
  ids.length > 200 ? h('p', {class: 'note'}, `and ${ids.length - 200} more (the jobs list filters them)`) : null);
}

async function jobPanel(ctx, caller, id, panel) {
  for (const c of closers.splice(1)) c(); // the flow's own stream stays first
  let j;
  try { j = await call('job.load', {context_id: ctx, caller_id: caller, id}); } catch (err) { panel.replaceChildren(h('p', {class: 'err'}, err.message)); return; }
  const acts = h('div', {class: 'actions'});
  if ((j.status === 'started' || j.status === 'dispatched') && can(ctx, 'executor')) {
    acts.append(h('span', {}, actionButton('Stop job', 'danger', () => call('job.stop', {context_id: ctx, caller_id: caller, id}))));
    acts.querySelector('button').id = 'job-stop';
  }
  const kv = [['Status', j.status], ['Script type', j.script_type], ['Function', j.function_name || '—'], ['Attempt', j.attempt || 0],
    ['Retries', j.retries], ['Timeout', j.timeout + ' s'], ['Created', fmtTime(j.created_at)], ['Worker', j.worker || '—'],
    ['Exit code', j.exit_code ?? 0], ['Error', j.error || '—'], ['Result', Object.entries(j.result || {}).map(([k, v]) => `${k}=${v}`).join('\n') || '—'],
    ['result_json', j.result_json ? JSON.stringify(j.result_json) : '—']];
  const log = h('pre', {class: 'log', id: 'job-log', tabindex: '0', 'aria-label': 'the job\'s log'});
  panel.replaceChildren(h('h2', {id: 'job-title'}, `Job ${id} `, badge(j.status)), acts,
    h('dl', {class: 'kv', id: 'job-info'}, kv.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, String(v))])),
    h('details', {}, h('summary', {}, j.function_name ? 'Handler call' : 'Script'), h('pre', {class: 'log'}, j.function_name ? `${j.function_name}(${JSON.stringify(j.args || [])}, ${JSON.stringify(j.kwargs || {})})` : j.script)),
    h('h2', {}, 'Log'), log);
  const es = new EventSource(`/ui/api/log?context_id=${ctx}&caller_id=${caller}&id=${id}`);
  es.addEventListener('log', e => {
    const c = JSON.parse(e.data);
    log.append(c.logs);
    log.scrollTop = log.scrollHeight;
    if (c.complete) { log.dataset.complete = '1'; es.close(); }
  });
  es.addEventListener('end', e => { log.append('\n[' + JSON.parse(e.data).error + ']'); es.close(); });
  es.onerror = () => { if (log.dataset.complete) es.close(); };
  closers.push(() => es.close());
}

async function jobPage(ctx, caller, id) {
  shell(ctx, 'jobs');
  const panel = h('section', {id: 'job-panel'});
  main.replaceChildren(h('h1', {}, `Job ${id}`), panel);
  await jobPanel(ctx, caller, id, panel);
}

// ---------- events, submit ----------

function eventsPage(ctx) {
  shell(ctx, 'events');
  const list = h('ol', {class: 'feed', id: 'events-feed', reversed: true});
  main.replaceChildren(h('h1', {}, `Events · context ${ctx}`), h('p', {class: 'note'}, 'Live: new events appear at the top.'), list);
  follow(ctx, 0, ev => {
    list.prepend(h('li', {}, `${new Date(ev.time_ms).toISOString().slice(11, 23)} ${ev.type}`, ev.flow_id ? ` flow ${ev.flow_id}` : '', ev.job_id ? ` job ${ev.job_id}` : '',
      ev.status ? ` ${ev.status}` : '', ` by ${ev.actor}`, ev.detail ? ` — ${ev.detail}` : ''));
    while (list.children.length > 500) list.lastChild.remove();
  }).addEventListener('open', () => { window.heroFeed = true; });
}

function submitPage(ctx) {
  shell(ctx, 'submit');
  const out = h('p', {id: 'submit-result', role: 'status'});
  const ta = h('textarea', {name: 'flow_file', id: 'flow-file', required: true, spellcheck: 'false',
    placeholder: 'name: example\njobs:\n  - name: a\n    type: sh\n    script: echo A=1 > "$HERO_RESULT_FILE"\n  - name: b\n    type: sh\n    depends: [a]\n    script: echo done'});
  const form = h('form', {id: 'submit-form', onsubmit: async e => {
    e.preventDefault();
    out.textContent = '';
    out.className = '';
    try {
      const r = await api('submit', {method: 'POST', body: {context_id: ctx, flow_file: ta.value}});
      out.replaceChildren('Started ', h('a', {href: `#/c/${ctx}/flow/${r.flow.id}`, id: 'submitted-flow'}, `flow ${r.flow.id}`));
    } catch (err) { out.textContent = err.message; out.className = 'err'; }
  }}, h('label', {}, 'Flow file (YAML, as heroctl flow submit takes it; script: rather than file:)', ta), h('button', {class: 'primary', type: 'submit', id: 'submit-flow'}, 'Submit flow'));
  main.replaceChildren(h('h1', {}, `Submit a flow · context ${ctx}`), can(ctx, 'admin') ? form : h('p', {}, 'Submitting a flow needs the admin role in this context.'), out);
}

// ---------- router ----------

async function route() {
  for (const c of closers.splice(0)) c();
  const [path, qs] = location.hash.slice(1).split('?');
  const parts = path.split('/').filter(Boolean);
  if (parts[0] === 'login' || !me) return loginPage();
  if (parts[0] !== 'c') return contextsPage();
  const ctx = Number(parts[1]);
  if (!me.contexts.some(c => c.id === ctx)) {
    shell(0, '');
    main.replaceChildren(h('h1', {}, `Context ${parts[1]}`), h('p', {class: 'err', id: 'page-error'}, `You are not a member of context ${parts[1]}.`));
    return;
  }
  const q = Object.fromEntries(new URLSearchParams(qs || ''));
  switch (parts[2]) {
    case 'flow': return flowPage(ctx, Number(parts[3]));
    case 'job': return jobPage(ctx, Number(parts[3]), Number(parts[4]));
    case 'events': return eventsPage(ctx);
    case 'submit': return submitPage(ctx);
    case 'queues': return queuesPage(ctx);
    case 'schedules': return schedulesPage(ctx);
    case 'jobs': case 'runners': case 'dlq': return listPage(ctx, parts[2], q);
    default: return listPage(ctx, 'flows', q);
  }
}

// linkSignIn signs in with a one-time link (heroctl console login): its token is in
// the fragment, which no server sees; it is dropped from the address and history.
async function linkSignIn() {
  const link = location.hash.slice('#/link/'.length);
  history.replaceState(null, '', location.pathname + location.search + '#/');
  try {
    await api('login', {method: 'POST', body: {link}});
  } catch (err) {
    loginPage();
    document.getElementById('login-error').textContent = err.message;
    document.body.dataset.ready = 'signed-out';
    return false;
  }
  return true;
}

async function start() {
  if (location.hash.startsWith('#/link/') && !(await linkSignIn())) return;
  try { me = await api('me'); } catch (_) { me = null; }
  if (me && (location.hash === '' || location.hash.startsWith('#/login'))) location.hash = '#/';
  else await route();
  document.body.dataset.ready = me ? 'signed-in' : 'signed-out';
}

window.addEventListener('hashchange', route);
start();
