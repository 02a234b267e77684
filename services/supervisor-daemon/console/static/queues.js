// Hero console: the queues page (depths, pauses, the last hour's charts) and the
// schedules page. Plain ES module, no build step; the shell and helpers are app.js's.

import {h, shell, main, api, call, can, actionButton, badge, follow, closers} from './app.js';

export {queuesPage, schedulesPage};

// ---------- queues and charts ----------

const svgNS = 'http://www.w3.org/2000/svg';
function sv(tag, attrs = {}, ...kids) {
  const el = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const k of kids) el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return el;
}

// chart draws one series of a value per minute as a small SVG (bars or a line; null:
// no value), with its summary as text for those who do not see it.
function chart(id, title, unit, series, value, kind, fromMs) {
  const W = 320, H = 120, L = 34, B = 18, T = 8;
  const vals = series.map(value);
  const known = vals.filter(v => v !== null);
  const top = Math.max(1, ...known);
  const x = i => L + (i * (W - L - 4)) / Math.max(1, vals.length);
  const y = v => H - B - (v / top) * (H - B - T);
  const last = known.length ? known[known.length - 1] : null;
  const total = known.reduce((a, b) => a + b, 0);
  const summary = kind === 'bars' ? `${total} ${unit} in the last ${vals.length} minutes; ${last ?? 0} in the last` :
    (last === null ? 'no value yet' : `now ${last} ${unit}; highest ${Math.max(...known)}`);
  const svg = sv('svg', {viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-labelledby': id + '-t', class: 'chart', id},
    sv('title', {id: id + '-t'}, `${title}: ${summary}`),
    sv('line', {x1: L, y1: H - B, x2: W, y2: H - B, class: 'axis'}), sv('line', {x1: L, y1: T, x2: L, y2: H - B, class: 'axis'}),
    sv('text', {x: L - 4, y: T + 8, 'text-anchor': 'end', class: 'tick'}, top), sv('text', {x: L - 4, y: H - B, 'text-anchor': 'end', class: 'tick'}, 0),
    sv('text', {x: L, y: H - 4, class: 'tick'}, new Date(fromMs).toISOString().slice(11, 16)), sv('text', {x: W, y: H - 4, 'text-anchor': 'end', class: 'tick'}, 'now'));
  if (kind === 'bars') {
    const w = Math.max(1, (W - L - 4) / Math.max(1, vals.length) - 1);
    vals.forEach((v, i) => { if (v) svg.append(sv('rect', {x: x(i), y: y(v), width: w, height: H - B - y(v), class: 'bar'})); });
  } else {
    let d = '';
    vals.forEach((v, i) => { if (v !== null) d += (d && vals[i - 1] !== null ? ' L' : ' M') + ` ${x(i).toFixed(1)} ${y(v).toFixed(1)}`; });
    if (d) svg.append(sv('path', {d, class: 'line'}));
  }
  return h('figure', {class: 'chart-box'}, h('figcaption', {}, title), svg, h('p', {class: 'note', id: id + '-summary'}, summary));
}

async function queuesPage(ctx) {
  shell(ctx, 'queues');
  const tbody = h('tbody');
  const summary = h('p', {id: 'queues-summary', role: 'status'});
  const charts = h('div', {class: 'charts', id: 'charts'});
  main.replaceChildren(h('h1', {}, `Queues · context ${ctx}`), summary,
    h('div', {class: 'table-wrap'}, h('table', {id: 'queues-table'}, h('thead', {}, h('tr', {}, ['Queue', 'Waiting', 'Paused', ''].map(x => h('th', {}, x)))), tbody)),
    h('h2', {}, 'The last hour, per minute'), charts);
  let loads = 0;
  const load = async () => {
    let d;
    try { d = await api(`stats?context_id=${ctx}`); } catch (err) { summary.textContent = err.message; summary.className = 'err'; return; }
    const recent = d.series.slice(-5);
    const rate = recent.reduce((a, b) => a + b.started, 0) / Math.max(1, recent.length);
    summary.textContent = `${d.waiting} waiting, ${d.running} running; ${rate.toFixed(1)} jobs started per minute (last ${recent.length} min)` +
      (d.complete ? '' : ` — the charts show the newest ${d.events} events`);
    tbody.replaceChildren(...d.queues.map(q => {
      const acts = h('td', {class: 'row-actions'});
      if (d.queue_actions && can(ctx, 'executor') && q.queue.startsWith('queue:')) {
        const m = q.paused ? 'queue.resume' : 'queue.pause';
        // queue.pause names a queue by its script type or executor (queue:<type>, queue:exec:<executor>).
        const name = q.queue.slice('queue:'.length);
        const ref = name.startsWith('exec:') ? {executor: name.slice('exec:'.length)} : {script_type: name};
        acts.append(actionButton(q.paused ? 'Resume' : 'Pause', q.paused ? 'primary' : '', async () => { await call(m, {context_id: ctx, ...ref}); await load(); }));
      }
      return h('tr', {'data-queue': q.queue}, h('td', {}, q.queue), h('td', {class: 'depth'}, q.depth),
        h('td', {class: 'paused'}, q.paused === undefined ? '—' : (q.paused ? 'paused' : 'no')), acts);
    }));
    const s = d.series;
    charts.replaceChildren(
      chart('chart-throughput', 'Throughput (jobs finished)', 'jobs', s, b => b.finished, 'bars', d.from_ms),
      chart('chart-failures', 'Failures (jobs failed)', 'failures', s, b => b.failed, 'bars', d.from_ms),
      chart('chart-depth', 'Queue depth (waiting)', 'waiting', s, b => b.depth, 'line', d.from_ms),
      chart('chart-hop', 'Hop latency (dispatch to start, median ms)', 'ms', s, b => (b.hop_ms < 0 ? null : b.hop_ms), 'line', d.from_ms));
    window.heroStats = ++loads;
  };
  await load();
  // Live: the context's events bring a new reading, at most one per 3 s.
  let timer = null;
  follow(ctx, 0, () => { if (!timer) timer = setTimeout(() => { timer = null; load(); }, 3000); });
  closers.push(() => clearTimeout(timer));
}

const fmtMs = ms => ms ? new Date(ms).toISOString().replace('T', ' ').slice(0, 19) : '—';

async function schedulesPage(ctx) {
  shell(ctx, 'schedules');
  const tbody = h('tbody');
  const out = h('p', {id: 'schedule-result', role: 'status'});
  main.replaceChildren(h('h1', {}, `Schedules · context ${ctx}`), out,
    h('div', {class: 'table-wrap'}, h('table', {id: 'schedules-table'}, h('thead', {}, h('tr', {},
      ['Schedule', 'When', 'State', 'Next', 'Last run', 'Fired / skipped / missed', 'Last error', ''].map(x => h('th', {}, x)))), tbody)));
  const load = async () => {
    let d;
    try { d = await call('schedule.list', {context_id: ctx}); } catch (err) { out.textContent = err.message; out.className = 'err'; return; }
    tbody.replaceChildren(...(d.items || []).map(sc => {
      const acts = h('td', {class: 'row-actions'});
      if (can(ctx, 'executor')) {
        acts.append(sc.paused ? actionButton('Resume', 'primary', async () => { await call('schedule.resume', {context_id: ctx, id: sc.id}); await load(); })
          : actionButton('Pause', '', async () => { await call('schedule.pause', {context_id: ctx, id: sc.id, note: 'paused from the console'}); await load(); }));
        acts.append(actionButton('Trigger', '', async () => {
          const r = await call('schedule.trigger', {context_id: ctx, id: sc.id});
          out.className = '';
          const run = r.flow ? h('a', {href: `#/c/${ctx}/flow/${r.flow.id}`, id: 'triggered-flow'}, `flow ${r.flow.id}`)
            : h('a', {href: `#/c/${ctx}/job/${r.job.caller_id}/${r.job.id}`, id: 'triggered-job'}, `job ${r.job.id}`);
          out.replaceChildren(`${sc.id}: run `, run, r.existing ? ' (existing)' : '');
          await load();
        }));
      }
      const spec = sc.spec.cron ? `cron ${sc.spec.cron}` + (sc.spec.timezone ? ` (${sc.spec.timezone})` : '') : `every ${sc.spec.every}`;
      const [lc, lj] = (sc.last_run || '').split(':');
      return h('tr', {'data-id': sc.id}, h('td', {}, sc.id), h('td', {}, spec + (sc.spec.jitter ? `, jitter ${sc.spec.jitter}` : '')),
        h('td', {class: 'state'}, sc.paused ? h('span', {class: 'badge st-paused'}, 'paused') : badge('active'), sc.paused && sc.note ? ` ${sc.note}` : ''),
        h('td', {}, sc.paused ? '—' : fmtMs(sc.next_fire_ms || sc.next_tick_ms)),
        h('td', {}, sc.last_flow ? h('a', {href: `#/c/${ctx}/flow/${sc.last_flow}`}, `flow ${sc.last_flow}`)
          : lj ? h('a', {href: `#/c/${ctx}/job/${lc}/${lj}`}, `job ${lj}`) : '—'),
        h('td', {}, `${sc.fired} / ${sc.skipped} / ${sc.missed}`), h('td', {}, sc.last_error || ''), acts);
    }));
    if (!(d.items || []).length) tbody.append(h('tr', {}, h('td', {colspan: 8}, 'No schedules in this context (heroctl schedule create makes one).')));
    document.body.dataset.schedules = String((d.items || []).length);
  };
  await load();
}
