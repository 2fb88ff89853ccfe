// The operator console's page. No framework, no build step; everything it shows comes from the
// gateway's own API under /ui/api, as the session's operator. The roster, the asks, the
// gateway's figures, the flows and the dead letters come over one event stream (/ui/api/events),
// each as it changes; the entity shown, a flow opened and a message followed are fetched.
// Text goes in with textContent only, never as HTML; and the gateway sends every string
// neutralised (src/text/neutralise.ts), so no name, body or detail can act or reorder what is shown.

const rosterBody = document.querySelector('#roster tbody');
const rosterCount = document.getElementById('roster-count');
const who = document.getElementById('who');
const link = document.getElementById('link');

function cell(text, className) {
  const td = document.createElement('td');
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

/** A cell whose text is a button that opens something (an entity, a flow). */
function linkCell(text, open, { title, className } = {}) {
  const button = document.createElement('button');
  button.type = 'button';
  button.className = className ? `link-button ${className}` : 'link-button';
  button.textContent = text;
  if (title) button.title = title;
  button.addEventListener('click', open);
  const td = document.createElement('td');
  td.append(button);
  return td;
}

/** name@host by gid, from the last roster: a dead letter's routing key is a gid. */
const addressByGid = new Map();

/**
 * A roster row's actions: Stop for an agent started with spawn (bridge_stop ends only those);
 * Approve and Deny while a worker's agent asks its owner for a permission (a worker behind an
 * agent host; on another host, its host takes the answer only from an operator on the host
 * of the entity that spawned it, and says so otherwise).
 */
function actionsCell(entry) {
  const td = document.createElement('td');
  // What an action did goes in the note, what went wrong in the error line (never both).
  const note = document.getElementById('roster-note');
  const error = document.getElementById('roster-error');
  const action = (label, title, run) => {
    const button = document.createElement('button');
    button.type = 'button';
    button.textContent = label;
    button.title = title;
    button.addEventListener('click', async () => {
      button.disabled = true;
      try {
        note.textContent = (await run()) ?? '';
        error.textContent = '';
      } catch (err) {
        note.textContent = '';
        error.textContent = `${entry.name}: ${label.toLowerCase()} failed: ${err.message}`;
        button.disabled = false;
      }
    });
    td.append(button);
  };
  if (entry.spawned) {
    action('Stop', 'Stop this agent (started with spawn)', async () => {
      const outcome = await post('/ui/api/stop', { gid: entry.gid });
      return outcome.status === 'pending' ? `stop of ${entry.name} asked; its result comes later` : '';
    });
  }
  if (entry.status === 'active.blocked' && entry.kind === 'worker') {
    // The request the row shows is the one answered, whatever else the agent asks meanwhile.
    const request = entry.agent?.permission?.request;
    const answer = (decision) => async () => {
      const answered = await post('/ui/api/owner-answer', {
        worker: `${entry.name}@${entry.host}`,
        decision,
        ...(request === undefined ? {} : { request }),
      });
      return answered.said;
    };
    action('Approve', "Allow its agent's permission request, once", answer('allow'));
    action('Deny', "Deny its agent's permission request", answer('deny'));
  }
  return td;
}

/** The entity whose deliveries the detail section shows (refreshed every 3 s). */
let shownEntity;

async function showEntity(gid) {
  shownEntity = gid;
  const section = document.getElementById('entity');
  const res = await fetch(`/ui/api/entity?gid=${encodeURIComponent(gid)}`);
  const detail = await res.json();
  section.hidden = false;
  const title = document.getElementById('entity-title');
  const note = document.getElementById('entity-note');
  const body = document.querySelector('#deliveries tbody');
  if (!res.ok) {
    title.textContent = 'Entity';
    note.textContent = detail.error ? `${detail.error.code}: ${detail.error.message}` : res.statusText;
    body.replaceChildren();
    return;
  }
  const { entry, local, deliveries } = detail;
  title.textContent = `${entry.name}@${entry.host} (${entry.kind})`;
  section.dataset.gid = entry.gid;
  if (!local) {
    note.textContent = `It lives on ${entry.host}: its deliveries are in that host's log; open that gateway's console for them.`;
    body.replaceChildren();
    return;
  }
  const count = deliveries.length === 1 ? 'delivery' : `${deliveries.length} deliveries`;
  note.textContent = `Its latest ${count} on this host, newest first (the log keeps no text).`;
  body.replaceChildren(
    ...deliveries.map((delivery) => {
      const tr = document.createElement('tr');
      tr.dataset.msgId = delivery.msgId;
      tr.append(
        cell(delivery.kind ?? '—'),
        cell(delivery.sender ? (addressByGid.get(delivery.sender) ?? delivery.sender) : '—'),
        cell(delivery.problem ? `damaged: ${delivery.problem}` : delivery.state, 'state'),
        cell(delivery.acceptedAt ? new Date(delivery.acceptedAt).toLocaleTimeString() : '—'),
        cell(delivery.size === null ? '—' : String(delivery.size), 'number'),
        cell(delivery.msgId, 'id'),
      );
      return tr;
    }),
  );
}

/** The kind cell: a worker behind an agent host says which protocol its messages go over, and to which agent. */
function kindCell(entry) {
  if (!entry.agent) return cell(entry.kind);
  const td = cell(`${entry.kind} · ${entry.agent.path}`);
  td.title = `its messages go to ${entry.agent.agent} over ${entry.agent.path}, not typed into a terminal`;
  return td;
}

/** The status cell: while its agent asks its owner, which request and what it asks for. */
function statusCell(entry) {
  const permission = entry.agent?.permission;
  const text = permission
    ? `${entry.status}: request ${permission.request}, ${permission.title}`
    : entry.status;
  return cell(text, `status-${entry.status.split('.').pop()}`);
}

function rosterRow(entry) {
  const tr = document.createElement('tr');
  tr.dataset.gid = entry.gid;
  tr.append(
    linkCell(entry.name, () => showEntity(entry.gid), { title: 'Show its latest deliveries' }),
    kindCell(entry),
    cell(entry.host),
    statusCell(entry),
    cell((entry.groups ?? []).join(', ')),
    cell(entry.depth === undefined ? '—' : String(entry.depth), 'number'),
    cell(entry.lastActiveAt === undefined ? '—' : new Date(entry.lastActiveAt).toLocaleTimeString()),
    actionsCell(entry),
  );
  return tr;
}

/**
 * The rows for `items` by key, each with the JSON of the item it shows: the row of an item that
 * did not change is kept (its DOM node), a changed or new one is drawn by `render`.
 */
function keyedRows(previous, items, keyOf, render) {
  const rows = new Map();
  for (const item of items) {
    const shown = JSON.stringify(item);
    const kept = previous.get(keyOf(item));
    rows.set(keyOf(item), { shown, tr: kept?.shown === shown ? kept.tr : render(item) });
  }
  return rows;
}

/**
 * Puts `rows` (a keyedRows map) into `body` in their order, removing, adding and moving only the
 * rows that differ: with a thousand rows, one new entity must not lay the whole table out again.
 */
function placeRows(body, rows) {
  const wanted = [...rows.values()].map((row) => row.tr);
  const keep = new Set(wanted);
  for (const child of [...body.children]) if (!keep.has(child)) child.remove();
  let cursor = body.firstElementChild;
  for (const tr of wanted) {
    if (tr === cursor) cursor = cursor.nextElementSibling;
    else body.insertBefore(tr, cursor);
  }
}

let rosterRows = new Map();
let rosterNames = '';

function renderRoster(entries) {
  addressByGid.clear();
  for (const entry of entries) addressByGid.set(entry.gid, `${entry.name}@${entry.host}`);
  rosterRows = keyedRows(rosterRows, entries, (entry) => entry.gid, rosterRow);
  placeRows(rosterBody, rosterRows);
  const names = entries.map((entry) => `${entry.name}@${entry.host}`);
  if (names.join('\n') !== rosterNames) {
    rosterNames = names.join('\n');
    document.getElementById('names').replaceChildren(
      ...names.map((name) => {
        const option = document.createElement('option');
        option.value = name;
        return option;
      }),
    );
  }
  const hosts = new Set(entries.map((entry) => entry.host));
  rosterCount.textContent = `(${entries.length} on ${hosts.size} host${hosts.size === 1 ? '' : 's'})`;
}

function setLink(state, text) {
  link.dataset.state = state;
  link.textContent = `live: ${text}`;
}

async function whoAmI() {
  const res = await fetch('/ui/api/me');
  if (res.status === 401) {
    window.location.reload();
    return;
  }
  const me = await res.json();
  who.textContent = `${me.name}@${me.host} (operator)`;
}

function listen() {
  const events = new EventSource('/ui/api/events');
  events.addEventListener('open', () => setLink('live', 'connected'));
  const topics = {
    roster: renderRoster,
    asks: renderAsks,
    overview: renderOverview,
    flows: renderFlows,
    dlq: renderDeadLetters,
  };
  for (const [topic, render] of Object.entries(topics)) {
    events.addEventListener(topic, (event) => render(JSON.parse(event.data)));
  }
  events.addEventListener('logout', () => {
    events.close();
    window.location.reload();
  });
  // EventSource reconnects by itself; say so meanwhile.
  events.addEventListener('error', () => setLink('lost', 'reconnecting'));
}

/** A console action: POSTs JSON (the browser adds Origin), returns the result or throws its error text. */
async function post(path, body) {
  const res = await fetch(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const reply = await res.json();
  if (!res.ok)
    throw new Error(reply.error?.message ? `${reply.error.code}: ${reply.error.message}` : res.statusText);
  return reply;
}

// Stages after which nothing more happens to a delivery (src/wire/receipt.ts finalStages).
const finalStages = new Set(['submitted', 'handed-over', 'dead-lettered', 'too-late']);
const sentBody = document.querySelector('#sent tbody');

/** Follows one sent message's stage (R-RC1) until it is final, or for two minutes. */
async function follow(msgId, stageCell) {
  const until = Date.now() + 120_000;
  while (Date.now() < until) {
    const res = await fetch(`/ui/api/message?msgId=${encodeURIComponent(msgId)}`);
    if (res.ok) {
      const status = await res.json();
      const stage = status.failure ? `failed: ${status.failure}` : (status.stage ?? status.sendState);
      stageCell.textContent = stage;
      stageCell.className = `stage stage-${status.stage ?? 'none'}`;
      if (status.failure || finalStages.has(status.stage)) return;
    }
    await new Promise((resolve) => setTimeout(resolve, 1_000));
  }
}

document.getElementById('send').addEventListener('submit', async (event) => {
  event.preventDefault();
  const form = event.target;
  const to = form.elements.to.value;
  const text = form.elements.text.value;
  const error = document.getElementById('send-error');
  error.textContent = '';
  try {
    const sent = await post('/ui/api/send', { to, text });
    const stage = cell(sent.stage ?? 'sent', 'stage');
    const tr = document.createElement('tr');
    tr.dataset.msgId = sent.msgId;
    tr.append(cell(`${sent.to.name}@${sent.to.host}`), cell(text), stage, cell(sent.msgId, 'id'));
    sentBody.prepend(tr);
    form.elements.text.value = '';
    void follow(sent.msgId, stage);
  } catch (err) {
    error.textContent = err.message;
  }
});

const svgNs = 'http://www.w3.org/2000/svg';

function svgElement(name, attributes, text) {
  const element = document.createElementNS(svgNs, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, String(value));
  if (text !== undefined) element.textContent = text;
  return element;
}

/** A horizontal bar chart of `{ label, value }` rows into `svg`, drawn with the DOM (no library). */
function barChart(svg, rows, { barClass = 'bar', empty = 'nothing yet' } = {}) {
  const rowHeight = 18;
  const labelWidth = 110;
  const width = 420;
  const height = Math.max(1, rows.length) * rowHeight + 4;
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', String(height));
  const max = Math.max(0, ...rows.map((row) => row.value));
  if (rows.length === 0 || max === 0) {
    svg.replaceChildren(svgElement('text', { x: 0, y: 13, class: 'empty' }, empty));
    return;
  }
  const room = width - labelWidth - 50;
  svg.replaceChildren(
    ...rows.flatMap((row, i) => {
      const y = i * rowHeight + 2;
      const length = Math.max(row.value > 0 ? 1 : 0, Math.round((row.value / max) * room));
      return [
        svgElement('text', { x: 0, y: y + 12 }, row.label),
        svgElement('rect', { x: labelWidth, y, width: length, height: rowHeight - 4, class: barClass }),
        svgElement('text', { x: labelWidth + length + 4, y: y + 12 }, String(row.value)),
      ];
    }),
  );
}

function latencyLabel(le) {
  if (le === null) return '> 60 s';
  return le < 1 ? `≤ ${Math.round(le * 1000 * 10) / 10} ms` : `≤ ${le} s`;
}

/**
 * A topic's read that failed (`{ error }`): its section says why, until a read succeeds (what an
 * action of the page wrote there stays); false when it did not fail.
 */
function showFailure(element, reply) {
  if (reply.error) {
    element.textContent = `${reply.error.code}: ${reply.error.message}`;
    element.dataset.failure = 'true';
    return true;
  }
  if (element.dataset.failure) {
    element.textContent = '';
    delete element.dataset.failure;
  }
  return false;
}

function renderOverview(overview) {
  if (showFailure(document.getElementById('gateway-error'), overview)) return;
  const facts = [
    ['host', overview.host],
    ['mode', overview.mode],
    ['up since', new Date(overview.startedAt).toLocaleString()],
    ...(overview.broker
      ? [
          ['broker', `${overview.broker.state}${overview.broker.node ? ` (${overview.broker.node})` : ''}`],
          ['queue mode', overview.broker.queueMode],
          ['peers', overview.broker.peers.join(', ') || 'none'],
          ['bridge.dlq', String(overview.broker.deadLetterQueue ?? '—')],
        ]
      : []),
    [
      'deliveries',
      Object.entries(overview.deliveries)
        .map(([state, n]) => `${n} ${state}`)
        .join(', ') || 'none',
    ],
  ];
  document.getElementById('gateway').replaceChildren(
    ...facts.flatMap(([term, value]) => {
      const dt = document.createElement('dt');
      dt.textContent = term;
      const dd = document.createElement('dd');
      dd.textContent = value;
      dd.dataset.fact = term;
      return [dt, dd];
    }),
  );
  // Trailing empty buckets say nothing: the histogram ends at the slowest delivery seen.
  const buckets = overview.deliveryLatency;
  let last = buckets.length - 1;
  while (last >= 0 && buckets[last].count === 0) last--;
  barChart(
    document.getElementById('latency-chart'),
    buckets.slice(0, last + 1).map((bucket) => ({ label: latencyLabel(bucket.le), value: bucket.count })),
    { empty: 'no delivery yet' },
  );
  barChart(
    document.getElementById('dead-letter-chart'),
    Object.entries(overview.deadLetters).map(([reason, value]) => ({ label: reason, value })),
    { barClass: 'bar bad', empty: 'no dead letter' },
  );
}

/** The wall-clock time of an HLC (`<15 digits of ms>.<counter>`), for reading. */
function hlcTime(hlc) {
  return new Date(Number(hlc.slice(0, 15))).toLocaleTimeString();
}

function shortId(id) {
  return id && id.length > 12 ? id.slice(-8) : (id ?? '—');
}

let flowRows = new Map();

function renderFlows(flows) {
  if (showFailure(document.getElementById('flows-error'), flows)) return;
  document.getElementById('flows-count').textContent = `(${flows.length})`;
  flowRows = keyedRows(
    flowRows,
    flows,
    (flow) => flow.traceId,
    (flow) => {
      const tr = document.createElement('tr');
      tr.dataset.traceId = flow.traceId;
      tr.append(
        linkCell(flow.traceId, () => showFlow(flow.traceId), { className: 'id' }),
        cell(flow.hosts.join(', ')),
        cell(hlcTime(flow.firstHlc)),
        cell(hlcTime(flow.lastHlc)),
        cell(String(flow.events), 'number'),
        cell(flow.actorKinds.join(', ')),
        cell(`${flow.last.actorKind} ${flow.last.event} → ${flow.last.toState}`),
      );
      return tr;
    },
  );
  placeRows(document.querySelector('#flows tbody'), flowRows);
}

/** The flow the timeline shows, and the other hosts' exports given for it. */
let shownFlow;
let flowExports = [];

async function showFlow(traceId) {
  if (traceId !== shownFlow) flowExports = [];
  shownFlow = traceId;
  const section = document.getElementById('flow');
  section.hidden = false;
  section.dataset.traceId = traceId;
  document.getElementById('flow-title').textContent = `Flow ${traceId}`;
  const error = document.getElementById('flow-error');
  error.textContent = '';
  try {
    const flow = await post('/ui/api/flow', { traceId, exports: flowExports });
    const shown =
      flow.events.length < flow.total ? `the first ${flow.events.length} of ${flow.total}` : `${flow.total}`;
    const divergences =
      flow.divergences.length === 0
        ? 'every actor re-runs as recorded'
        : `${flow.divergences.length} divergence(s) from the current machines: ${flow.divergences
            .map((d) => `${d.actorKind} ${shortId(d.actorId)} at ${d.event} (${d.kind})`)
            .join('; ')}`;
    document.getElementById('flow-note').textContent =
      `${shown} events on ${flow.hosts.join(', ')}; ${divergences}.`;
    drawSequence(document.getElementById('sequence'), flow.sequence);
    showMachines(flow);
    document.querySelector('#timeline tbody').replaceChildren(
      ...flow.events.map((event) => {
        const tr = document.createElement('tr');
        tr.dataset.host = event.host;
        tr.append(
          cell(hlcTime(event.hlc)),
          cell(event.host),
          cell(`${event.actorKind} ${shortId(event.actorId)}`),
          cell(event.event),
          cell(`${event.fromState ?? '∅'} → ${event.toState}`),
        );
        return tr;
      }),
    );
  } catch (err) {
    error.textContent = err.message;
  }
}

/** A flow's sequence diagram into `svg`: a column per host, a row per step (src/replay/FlowSequence.ts). */
function drawSequence(svg, { hosts, steps }) {
  const column = 220;
  const row = 22;
  const top = 28;
  const width = Math.max(1, hosts.length) * column;
  const height = top + steps.length * row + 12;
  const x = (host) => hosts.indexOf(host) * column + column / 2;
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', String(height));
  const arrowHead = svgElement('marker', {
    id: 'sequence-arrow',
    viewBox: '0 0 10 10',
    refX: 10,
    refY: 5,
    markerWidth: 8,
    markerHeight: 8,
    orient: 'auto-start-reverse',
  });
  arrowHead.append(svgElement('path', { d: 'M0,0 L10,5 L0,10 z' }));
  const defs = svgElement('defs', {});
  defs.append(arrowHead);
  const parts = [defs];
  for (const host of hosts) {
    parts.push(
      svgElement('text', { x: x(host), y: 14, 'text-anchor': 'middle', class: 'host' }, host),
      svgElement('line', { x1: x(host), y1: top - 6, x2: x(host), y2: height, class: 'lifeline' }),
    );
  }
  steps.forEach((step, i) => {
    const y = top + i * row + row / 2;
    const g = svgElement('g', { class: `step ${step.kind}` });
    if (step.kind === 'note') {
      const box = svgElement('rect', {
        x: x(step.host) - column / 2 + 6,
        y: y - 8,
        width: column - 12,
        height: 16,
        rx: 3,
      });
      g.append(box, svgElement('text', { x: x(step.host), y: y + 4, 'text-anchor': 'middle' }, step.label));
      g.classList.add('note');
    } else {
      const from = x(step.from);
      const to = x(step.to);
      // A message delivered on the host that sent it loops back to its own column.
      const path =
        from === to
          ? `M${from},${y - 6} h40 v12 h-40`
          : `M${from},${y + 4} L${to + (to > from ? -2 : 2)},${y + 4}`;
      g.append(
        svgElement('path', { d: path, class: step.kind, 'marker-end': 'url(#sequence-arrow)' }),
        svgElement(
          'text',
          {
            x: from === to ? from + 46 : (from + to) / 2,
            y: y,
            'text-anchor': from === to ? 'start' : 'middle',
          },
          step.label,
        ),
      );
    }
    parts.push(g);
  });
  svg.replaceChildren(...parts);
}

/** The state-machine diagrams of the machines the flow went through, its path marked (as agentbridge viz --trace). */
function showMachines(flow) {
  const note = document.getElementById('machines-note');
  const unmatched = flow.unmatched.length;
  note.textContent =
    `${flow.machines.map((m) => m.kind).join(', ') || 'No machine'}: the transitions this flow took are drawn thick with their count, the states it reached filled.` +
    (unmatched > 0
      ? ` ${unmatched} recorded step(s) match no transition of the current machines (a log from an older version?).`
      : '');
  const parser = new DOMParser();
  document.getElementById('machines').replaceChildren(
    ...flow.machines.flatMap((machine) => {
      const heading = document.createElement('h4');
      heading.textContent = machine.kind;
      const diagram = document.createElement('div');
      diagram.className = 'diagram';
      diagram.dataset.machine = machine.kind;
      const svg = parser.parseFromString(machine.svg, 'image/svg+xml').documentElement;
      diagram.append(document.importNode(svg, true));
      return [heading, diagram];
    }),
  );
}

document.getElementById('flow-exports').addEventListener('change', async (event) => {
  flowExports = await Promise.all([...event.target.files].map((file) => file.text()));
  if (shownFlow) await showFlow(shownFlow);
});

let askRows = new Map();

function renderAsks(asks) {
  const error = document.getElementById('asks-error');
  if (showFailure(error, asks)) return;
  document.getElementById('asks-count').textContent = `(${asks.length})`;
  // Rows being typed into stay where they are: only asks that came or went change the table.
  askRows = keyedRows(
    askRows,
    asks,
    (ask) => ask.askId,
    (ask) => {
      const tr = document.createElement('tr');
      tr.dataset.askId = ask.askId;
      const form = document.createElement('form');
      form.className = 'answer';
      const input = document.createElement('input');
      input.name = 'text';
      input.required = true;
      input.placeholder = `answer as ${ask.main}`;
      const button = document.createElement('button');
      button.type = 'submit';
      button.textContent = 'Answer';
      form.append(input, button);
      form.addEventListener('submit', async (event) => {
        event.preventDefault();
        try {
          const outcome = await post('/ui/api/answer', {
            main: ask.main,
            askId: ask.askId,
            text: input.value,
          });
          error.textContent =
            outcome.status === 'too_late' ? `too late: ${outcome.why ?? 'the turn is over'}` : '';
        } catch (err) {
          error.textContent = err.message;
        }
      });
      const answerCell = document.createElement('td');
      answerCell.append(form);
      tr.append(cell(ask.main), cell(`${ask.from.name}@${ask.from.host}`), cell(ask.text), answerCell);
      return tr;
    },
  );
  placeRows(document.querySelector('#asks tbody'), askRows);
}

function renderDeadLetters(reply) {
  const error = document.getElementById('dlq-error');
  if (showFailure(error, reply)) return;
  const { letters, scanned, scanLimit, depth } = reply;
  const held = depth ?? scanned;
  const shown = letters.length < held ? `, the newest ${letters.length} shown` : '';
  const reach =
    scanned < scanLimit ? '' : ` of the first ${scanned} read; agentbridge dlq list --max N reads further`;
  document.getElementById('dlq-count').textContent = `(${held} held${shown}${reach})`;
  const rows = letters.map((letter) => {
    const tr = document.createElement('tr');
    tr.dataset.msgId = letter.msgId ?? '';
    tr.dataset.to = letter.routingKey;
    const button = document.createElement('button');
    button.type = 'button';
    button.textContent = 'Requeue';
    button.disabled = !letter.msgId;
    button.addEventListener('click', async () => {
      try {
        const result = await post('/ui/api/dlq/requeue', { msgId: letter.msgId });
        const skipped = Object.entries(result.skipped)
          .map(([reason, count]) => `${count} ${reason}`)
          .join(', ');
        error.textContent = result.requeued > 0 ? '' : `not requeued${skipped ? ` (left: ${skipped})` : ''}`;
      } catch (err) {
        error.textContent = err.message;
      }
    });
    const action = document.createElement('td');
    action.append(button);
    tr.append(
      cell(addressByGid.get(letter.routingKey) ?? letter.routingKey),
      cell(letter.from),
      cell(letter.reason),
      cell(letter.detail),
      cell(letter.msgId ?? '—', 'id'),
      action,
    );
    return tr;
  });
  document.querySelector('#dlq tbody').replaceChildren(...rows);
}

document.getElementById('logout').addEventListener('click', async () => {
  await fetch('/ui/api/logout', { method: 'POST' });
  window.location.reload();
});

await whoAmI();
listen();
setInterval(() => shownEntity && showEntity(shownEntity), 3_000);
