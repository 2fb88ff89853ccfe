// The operator console's page: who is logged in, and the roster of every host, kept live over
// server-sent events (/ui/api/events). No framework, no build step; everything it shows comes
// from the gateway's own API under /ui/api, as the session's operator.

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

function renderRoster(entries) {
  const rows = entries.map((entry) => {
    const tr = document.createElement('tr');
    tr.dataset.gid = entry.gid;
    tr.append(
      cell(entry.name),
      cell(entry.kind),
      cell(entry.host),
      cell(entry.status, `status-${entry.status.split('.').pop()}`),
      cell((entry.groups ?? []).join(', ')),
      cell(entry.depth === undefined ? '—' : String(entry.depth), 'number'),
    );
    return tr;
  });
  rosterBody.replaceChildren(...rows);
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
  events.addEventListener('roster', (event) => renderRoster(JSON.parse(event.data)));
  events.addEventListener('logout', () => {
    events.close();
    window.location.reload();
  });
  // EventSource reconnects by itself; say so meanwhile.
  events.addEventListener('error', () => setLink('lost', 'reconnecting'));
}

document.getElementById('logout').addEventListener('click', async () => {
  await fetch('/ui/api/logout', { method: 'POST' });
  window.location.reload();
});

await whoAmI();
listen();
