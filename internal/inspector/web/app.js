// agentbox inspector: a page that is a client of the agentbox HTTP API.
//
// Two rules hold everywhere in this file (docs/ARCHITECTURE.md, "The
// inspector"):
//   - Whatever the API returns (an agent's messages, command output, file
//     names, diffs, problem details) enters the page as text: through el()
//     and text nodes, never as HTML. The page's Content-Security-Policy
//     enforces it: Trusted Types with no policy, so an HTML sink such as
//     innerHTML throws.
//   - The bearer token goes only into the Authorization header of fetch
//     calls to this origin, with credentials 'omit': never into a URL (logs,
//     history, Referer) and never into a cookie (which a browser would
//     attach to requests other sites make).
'use strict';

const TOKEN_KEY = 'agentbox.token';
const MAX_TEXT = 256 * 1024; // characters kept per output block; the rest is cut, with a note
const MAX_FILE = 512 * 1024; // bytes of a file shown

const app = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  view: null, // the current view: { close() }
};

// ---------------------------------------------------------------- DOM

// Attributes el() may set. Anything else is a programming error: no
// attribute can carry script (no on* attributes, no href but the page's
// own hash links, built here).
const ATTRS = new Set(['type', 'placeholder', 'value', 'title', 'name', 'autocomplete', 'rows',
  'for', 'id', 'href', 'role', 'aria-label', 'spellcheck', 'min', 'disabled', 'hidden', 'open', 'tabindex']);

// el builds an element: props sets the class ('class'), event listeners
// ('on' + event), data attributes ('data': object) and attributes of ATTRS;
// children are nodes or strings, and strings become text nodes.
function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'data') for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = String(dv);
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (ATTRS.has(k)) {
      if (k === 'href' && !String(v).startsWith('#')) throw new Error('el: only hash links');
      e.setAttribute(k, v === true ? '' : String(v));
    } else throw new Error('el: attribute not allowed: ' + k);
  }
  append(e, children);
  return e;
}

function append(parent, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    parent.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

function fmtTime(s) {
  if (!s) return '';
  const d = new Date(s);
  return isNaN(d) ? String(s) : d.toLocaleString();
}

// capText keeps the last MAX_TEXT characters of s.
function capText(s) {
  s = String(s ?? '');
  return s.length <= MAX_TEXT ? s : '[… ' + (s.length - MAX_TEXT) + ' characters cut …]\n' + s.slice(-MAX_TEXT);
}

// diffBlock shows a unified diff: one text span per line, classed by its
// first character.
function diffBlock(text) {
  const pre = el('pre', { class: 'diff' });
  for (const line of capText(text).split('\n')) {
    let cls = '';
    if (line.startsWith('+++') || line.startsWith('---')) cls = 'd-file';
    else if (line.startsWith('@@')) cls = 'd-hunk';
    else if (line.startsWith('+')) cls = 'd-add';
    else if (line.startsWith('-')) cls = 'd-del';
    pre.append(el('span', { class: cls }, line), '\n');
  }
  return pre;
}

function statusBadge(status) {
  return el('span', { class: 'badge st-' + String(status).replace(/[^a-z_]/g, '') }, status);
}

// ---------------------------------------------------------------- API

class APIError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || 'HTTP ' + status);
    this.status = status;
    this.problem = problem || {};
  }
}

function headers(extra) {
  const h = Object.assign({ Accept: 'application/json' }, extra);
  if (app.token) h.Authorization = 'Bearer ' + app.token;
  return h;
}

// api calls the API at path (this origin's) and returns the JSON answer,
// the Response with raw, or null for 204.
async function api(method, path, body, opts = {}) {
  const init = { method, headers: headers(), credentials: 'omit', cache: 'no-store', referrerPolicy: 'no-referrer', signal: opts.signal };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  if (!r.ok) {
    let p = null;
    try { p = await r.json(); } catch { /* not a problem document */ }
    if (r.status === 401 && !opts.noLogout) forget('The daemon refused the token: ' + ((p && p.detail) || 'unauthorized') + '.');
    throw new APIError(r.status, p);
  }
  if (opts.raw) return r;
  if (r.status === 204) return null;
  return r.json();
}

const enc = encodeURIComponent;
const sessionPath = (id) => '/v1/sessions/' + enc(id);

// ---------------------------------------------------------------- token

function forget(why) {
  app.token = '';
  sessionStorage.removeItem(TOKEN_KEY);
  route(why);
}

function showLogin(main, why) {
  const input = el('input', { type: 'password', id: 'token', name: 'token', autocomplete: 'off', spellcheck: 'false', placeholder: 'bearer token' });
  const msg = el('p', { class: 'error', id: 'login-error' }, why || '');
  const form = el('form', { id: 'login', class: 'card' },
    el('h2', null, 'Connect to this daemon'),
    el('p', null, 'Paste the daemon\'s API token (the file "token" in its data directory, or its --token). ',
      'It is kept in this tab only (sessionStorage) and sent only in the Authorization header.'),
    el('label', { for: 'token' }, 'Token '), input, ' ',
    el('button', { type: 'submit' }, 'Connect'), msg);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    app.token = input.value.trim();
    input.value = '';
    try {
      await api('GET', '/v1/sessions?limit=1', undefined, { noLogout: true });
    } catch (e) {
      app.token = '';
      msg.textContent = e.status === 401 ? 'The daemon refused this token.' : 'Cannot reach the daemon: ' + e.message;
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, app.token);
    route();
  });
  append(main, [form]);
  input.focus();
}

// ---------------------------------------------------------------- routing

async function route(why) {
  if (app.view) app.view.close();
  app.view = null;
  setConn('');
  const main = document.getElementById('main');
  clear(main);
  document.getElementById('logout').hidden = !app.token;
  if (!app.token) {
    // A daemon without authentication (--insecure-no-auth) needs none.
    try {
      await api('GET', '/v1/sessions?limit=1', undefined, { noLogout: true });
    } catch (e) {
      if (e.status === 401) return showLogin(main, why);
      append(main, [el('p', { class: 'error' }, 'Cannot reach the daemon: ' + e.message)]);
      return;
    }
  }
  const m = /^#\/s\/([A-Za-z0-9_-]{1,128})$/.exec(location.hash);
  app.view = m ? new SessionView(main, m[1]) : new SessionsView(main);
}

function setConn(state) {
  const c = document.getElementById('conn');
  c.textContent = state;
  c.className = 'conn ' + state.replace(/[^a-z]/g, '');
}

// ---------------------------------------------------------------- sessions

class SessionsView {
  constructor(main) {
    this.closed = false;
    this.agentSel = el('select', { id: 'new-agent', name: 'agent', 'aria-label': 'agent' });
    this.modeSel = el('select', { id: 'new-mode', name: 'permission_mode', 'aria-label': 'permission mode' },
      ['default', 'accept_edits', 'bypass', 'plan'].map((m) => el('option', { value: m }, m)));
    this.err = el('p', { class: 'error' });
    const form = el('form', { id: 'new-session', class: 'card' },
      el('h2', null, 'New session'),
      el('label', null, 'Agent ', this.agentSel), ' ',
      el('label', null, 'Permission mode ', this.modeSel), ' ',
      el('button', { type: 'submit', id: 'create' }, 'Create'), this.err);
    form.addEventListener('submit', (ev) => { ev.preventDefault(); this.create(); });
    this.tbody = el('tbody', { id: 'sessions' });
    append(main, [form, el('section', { class: 'card' }, el('h2', null, 'Sessions'),
      el('table', null, el('thead', null, el('tr', null, ['Session', 'Agent', 'Status', 'Model', 'Sandbox', 'Created'].map((h) => el('th', null, h)))), this.tbody))]);
    this.loadAgents();
    this.refresh();
    this.timer = setInterval(() => this.refresh(), 3000);
  }

  close() {
    this.closed = true;
    clearInterval(this.timer);
  }

  async loadAgents() {
    try {
      const { agents } = await api('GET', '/v1/agents');
      clear(this.agentSel);
      for (const a of agents) {
        append(this.agentSel, [el('option', { value: a.name, disabled: !a.available, title: a.reason || '' },
          a.name + (a.available ? '' : ' (unavailable)'))]);
      }
      const first = agents.find((a) => a.available);
      if (first) this.agentSel.value = first.name;
    } catch (e) {
      this.err.textContent = 'Agents: ' + e.message;
    }
  }

  async create() {
    this.err.textContent = '';
    try {
      const s = await api('POST', '/v1/sessions', { agent: this.agentSel.value, permission_mode: this.modeSel.value });
      location.hash = '#/s/' + s.id;
    } catch (e) {
      this.err.textContent = 'Cannot create the session: ' + e.message;
    }
  }

  async refresh() {
    let list;
    try {
      list = await api('GET', '/v1/sessions?limit=100');
    } catch (e) {
      if (!this.closed) this.err.textContent = 'Sessions: ' + e.message;
      return;
    }
    if (this.closed) return;
    clear(this.tbody);
    if (list.sessions.length === 0) {
      append(this.tbody, [el('tr', null, el('td', { class: 'muted' }, 'No sessions yet.'))]);
    }
    for (const s of list.sessions) {
      append(this.tbody, [el('tr', { data: { session: s.id } },
        el('td', null, el('a', { href: '#/s/' + enc(s.id) }, s.id)),
        el('td', null, s.agent),
        el('td', null, statusBadge(s.status)),
        el('td', null, s.model || ''),
        el('td', null, s.sandboxed ? (s.sandbox && s.sandbox.runtime) || 'yes' : 'no'),
        el('td', null, fmtTime(s.created_at)))]);
    }
  }
}

// ---------------------------------------------------------------- one session

class SessionView {
  constructor(main, id) {
    this.id = id;
    this.closed = false;
    this.abort = new AbortController();
    this.lastSeq = 0; // the resume point: the seq of the last event shown
    this.items = new Map(); // item id -> { node, body, item }
    this.requests = new Map(); // permission/question id -> card node
    this.usage = { input: 0, output: 0, cost: 0, turns: 0 };

    this.status = el('span', { id: 'status' });
    this.info = el('span', { class: 'muted', id: 'session-info' });
    this.usageEl = el('span', { id: 'usage', class: 'muted' });
    this.timeline = el('div', { id: 'timeline' });
    this.input = el('textarea', { id: 'message', rows: 3, placeholder: 'Message to the agent', 'aria-label': 'message' });
    this.err = el('p', { class: 'error', id: 'session-error' });
    const composer = el('form', { id: 'composer' }, this.input,
      el('div', null, el('button', { type: 'submit', id: 'send' }, 'Send'), ' ',
        el('button', { type: 'button', id: 'interrupt', onclick: () => this.interrupt() }, 'Interrupt')));
    composer.addEventListener('submit', (ev) => { ev.preventDefault(); this.send(); });
    this.input.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); this.send(); }
    });

    this.files = new FilesPanel(this.id);
    this.diff = new DiffPanel(this.id);
    this.console = new ConsolePanel(this.id);
    const conv = el('section', { id: 'tab-conversation', class: 'tab' }, this.timeline, composer, this.err);
    const tabs = { conversation: conv, files: this.files.node, diff: this.diff.node, console: this.console.node };
    const bar = el('nav', { class: 'tabs' }, Object.keys(tabs).map((name) =>
      el('button', { type: 'button', id: 'tabbtn-' + name, onclick: () => {
        for (const [n, node] of Object.entries(tabs)) node.hidden = n !== name;
        for (const b of bar.children) b.classList.toggle('active', b.id === 'tabbtn-' + name);
        if (name === 'files') this.files.load();
        if (name === 'diff') this.diff.load();
      } }, name[0].toUpperCase() + name.slice(1))));
    bar.firstChild.classList.add('active');
    this.files.node.hidden = true;
    this.diff.node.hidden = true;
    this.console.node.hidden = true;

    append(main, [
      el('div', { class: 'session-head' }, el('a', { href: '#/' }, '← sessions'), ' ',
        el('h2', null, id), ' ', this.status, ' ', this.info, ' ', this.usageEl),
      bar, conv, this.files.node, this.diff.node, this.console.node]);
    this.load();
    this.follow();
  }

  close() {
    this.closed = true;
    this.abort.abort();
    this.files.close();
    this.console.close();
  }

  async load() {
    try {
      const s = await api('GET', sessionPath(this.id));
      this.setStatus(s.status);
      this.info.textContent = [s.agent, s.model, s.permission_mode && 'permissions: ' + s.permission_mode,
        s.sandboxed ? 'sandbox: ' + ((s.sandbox && s.sandbox.runtime) || 'yes') : 'no sandbox'].filter(Boolean).join(' · ');
    } catch (e) {
      this.err.textContent = e.message;
    }
  }

  setStatus(st) {
    clear(this.status);
    append(this.status, [statusBadge(st)]);
  }

  async send() {
    const text = this.input.value;
    if (!text.trim()) return;
    this.err.textContent = '';
    try {
      await api('POST', sessionPath(this.id) + '/messages', { text });
      this.input.value = '';
    } catch (e) {
      this.err.textContent = 'Not sent: ' + e.message;
    }
  }

  async interrupt() {
    try {
      await api('POST', sessionPath(this.id) + '/interrupt');
    } catch (e) {
      this.err.textContent = 'Interrupt: ' + e.message;
    }
  }

  // follow reads the event stream, and after any break reconnects with
  // Last-Event-ID set to the last seq shown, so that nothing is missed or
  // shown twice. fetch, not EventSource: EventSource cannot send the
  // Authorization header, and the token must stay out of URLs.
  async follow() {
    let backoff = 250;
    while (!this.closed) {
      try {
        const h = headers({ Accept: 'text/event-stream' });
        if (this.lastSeq > 0) h['Last-Event-ID'] = String(this.lastSeq);
        const r = await fetch(sessionPath(this.id) + '/events/stream', {
          headers: h, credentials: 'omit', cache: 'no-store', referrerPolicy: 'no-referrer', signal: this.abort.signal,
        });
        if (r.status === 401) return forget('The daemon refused the token.');
        if (r.status === 404) {
          this.err.textContent = 'No such session.';
          setConn('');
          return;
        }
        if (!r.ok) throw new Error('HTTP ' + r.status);
        setConn('live');
        backoff = 250;
        await readSSE(r.body, (msg) => this.onMessage(msg));
      } catch (e) {
        if (this.closed) return;
      }
      if (this.closed) return;
      setConn('reconnecting');
      await new Promise((res) => setTimeout(res, backoff));
      backoff = Math.min(backoff * 2, 5000);
    }
  }

  onMessage(msg) {
    if (!msg.data) return;
    let ev;
    try { ev = JSON.parse(msg.data); } catch { return; }
    if (typeof ev.seq !== 'number' || ev.seq <= this.lastSeq) return;
    this.lastSeq = ev.seq;
    this.timeline.dataset.lastSeq = String(ev.seq);
    const stick = this.timeline.scrollHeight - this.timeline.scrollTop - this.timeline.clientHeight < 40;
    try {
      this.render(ev);
    } catch (e) {
      this.add(el('div', { class: 'ev error' }, 'Cannot show event ' + ev.seq + ': ' + e.message));
    }
    if (stick) this.timeline.scrollTop = this.timeline.scrollHeight;
  }

  add(node) {
    this.timeline.append(node);
    return node;
  }

  render(ev) {
    const d = ev.data || {};
    switch (ev.type) {
      case 'session.started':
        this.setStatus('idle');
        return this.add(el('div', { class: 'ev sys' }, (d.resumed ? 'Session resumed: ' : 'Session started: ') +
          [d.agent, d.model, d.mode && 'mode ' + d.mode, d.sandbox ? 'sandbox ' + (d.sandbox.runtime || '') : 'no sandbox'].filter(Boolean).join(' · ')));
      case 'session.ended':
        this.setStatus(d.reason === 'idle' ? 'stopped' : 'ended');
        return this.add(el('div', { class: 'ev sys' }, 'Session ended: ' + d.reason + (d.message ? ' — ' + d.message : ''),
          d.stderr_tail ? el('pre', null, capText(d.stderr_tail)) : null));
      case 'session.configured':
        return this.add(el('div', { class: 'ev sys' }, 'Configured: model ' + (d.model || 'default') + ', mode ' + (d.mode || 'default')));
      case 'turn.started':
        this.setStatus('running');
        return this.add(el('div', { class: 'ev turn' }, 'Turn ' + (d.turn_id || '')));
      case 'turn.completed': {
        this.setStatus('idle');
        const u = d.usage;
        if (u) {
          this.usage.input += u.input_tokens || 0;
          this.usage.output += u.output_tokens || 0;
          this.usage.cost += u.cost_usd || 0;
        }
        this.usage.turns++;
        this.usageEl.textContent = '· usage: ' + this.usage.input + ' in / ' + this.usage.output + ' out tokens' +
          (this.usage.cost ? ' · $' + this.usage.cost.toFixed(4) : '') + ' · ' + this.usage.turns + ' turns';
        return this.add(el('div', { class: 'ev turn', data: { stop: d.stop_reason } }, 'Turn ended: ' + d.stop_reason +
          ' in ' + d.duration_ms + ' ms' + (u ? ' · ' + u.input_tokens + ' in / ' + u.output_tokens + ' out tokens' : '') +
          (d.message ? ' — ' + d.message : '')));
      }
      case 'item.started':
      case 'item.completed':
        return this.item(d.item, ev.type === 'item.completed');
      case 'item.delta':
        return this.delta(d);
      case 'permission.requested':
        return this.permission(d);
      case 'permission.resolved':
        return this.resolved(d.id, (d.decision === 'allow' ? 'Allowed' : 'Denied') + ' by ' + d.by + (d.message ? ': ' + d.message : ''), d.decision);
      case 'question.requested':
        return this.question(d);
      case 'question.resolved':
        return this.resolved(d.id, d.cancelled ? 'No answer (' + d.by + ')' : 'Answered by ' + d.by + ': ' + (d.answer || d.option_id || ''), 'answered');
      case 'sandbox.violation':
        return this.add(el('div', { class: 'ev violation', data: { kind: d.kind } },
          el('strong', null, 'Sandbox ' + d.action + ' (' + d.kind + ')'), ' ', d.detail,
          el('div', { class: 'muted' }, [d.path && 'path ' + d.path, d.host && 'host ' + d.host + (d.port ? ':' + d.port : ''),
            d.rule && 'rule ' + d.rule, d.count > 1 && d.count + ' times',
            d.process && 'process ' + (d.process.command_line || d.process.name || d.process.pid)].filter(Boolean).join(' · '))));
      case 'error':
        return this.add(el('div', { class: 'ev error' }, 'Error ' + d.code + ': ' + d.message + (d.retryable ? ' (retryable)' : '')));
      case 'native':
        return this.add(el('details', { class: 'ev native' }, el('summary', null, 'native: ' + d.native_type),
          el('pre', null, capText(JSON.stringify(d.payload, null, 2)))));
      default:
        return this.add(el('div', { class: 'ev muted' }, ev.type));
    }
  }

  // item shows an item: created at item.started, redrawn whole at
  // item.completed (which carries the complete item).
  item(it, completed) {
    if (!it || !it.id) return;
    let rec = this.items.get(it.id);
    if (!rec) {
      rec = { node: this.add(el('div', { class: 'ev item k-' + String(it.kind).replace(/[^a-z_]/g, ''), data: { item: it.id, kind: it.kind } })), item: it, deltas: {} };
      this.items.set(it.id, rec);
    }
    rec.item = it;
    if (completed) rec.deltas = {};
    this.drawItem(rec);
  }

  delta(d) {
    const rec = this.items.get(d.item_id);
    if (!rec) return;
    rec.deltas[d.field] = (rec.deltas[d.field] || '') + d.delta;
    this.drawItem(rec);
  }

  drawItem(rec) {
    const it = rec.item;
    const n = rec.node;
    clear(n);
    n.dataset.status = it.status;
    const partsText = (it.content || []).map((p) => p.type === 'text' ? p.text : '[' + p.type + ' ' + (p.mime_type || p.path || p.uri || '') + ']').join('');
    const text = partsText + (rec.deltas.text || '');
    const st = it.status && it.status !== 'completed' ? el('span', { class: 'muted' }, ' (' + it.status + ')') : null;
    switch (it.kind) {
      case 'message':
        n.classList.add('role-' + String(it.role || 'assistant').replace(/[^a-z]/g, ''));
        append(n, [el('div', { class: 'who' }, it.role || 'assistant', st), el('div', { class: 'text' }, capText(text))]);
        break;
      case 'reasoning':
        append(n, [el('details', { open: it.status === 'in_progress' }, el('summary', null, 'Reasoning', st), el('div', { class: 'text' }, capText(text)))]);
        break;
      case 'command':
        append(n, [el('div', { class: 'who' }, 'Command', st, it.exit_code !== undefined ? ' · exit ' + it.exit_code : ''),
          el('pre', { class: 'cmd' }, '$ ' + (it.command || (it.argv || []).join(' '))),
          it.output || rec.deltas.output ? el('pre', { class: 'output' }, capText((it.output || '') + (rec.deltas.output || ''))) : null]);
        break;
      case 'file_change':
        append(n, [el('div', { class: 'who' }, 'File change', st),
          (it.changes || []).map((c) => el('div', { class: 'change', data: { path: c.path } },
            el('div', { class: 'path' }, c.kind + ' ' + c.path), c.diff ? diffBlock(c.diff) : null))]);
        break;
      case 'plan':
        append(n, [el('div', { class: 'who' }, 'Plan', st), el('ol', { class: 'plan' }, (it.entries || []).map((e) =>
          el('li', { class: 'plan-' + String(e.status).replace(/[^a-z_]/g, '') }, '[' + e.status + '] ' + e.content + (e.priority ? ' (' + e.priority + ')' : ''))))]);
        break;
      case 'web_search':
        append(n, [el('div', { class: 'who' }, 'Web search', st), el('div', { class: 'text' }, it.query || '')]);
        break;
      default: // tool_call, mcp_tool_call and kinds this page does not know
        append(n, [el('div', { class: 'who' }, (it.kind === 'mcp_tool_call' ? 'MCP ' + (it.server || '') + ' ' : 'Tool ') + (it.name || it.kind), st),
          it.input !== undefined || rec.deltas.input ? el('pre', { class: 'input' }, capText(rec.deltas.input || JSON.stringify(it.input, null, 2))) : null,
          it.output || rec.deltas.output ? el('pre', { class: 'output' }, capText((it.output || '') + (rec.deltas.output || ''))) : null,
          it.error ? el('pre', { class: 'error' }, capText(it.error)) : null]);
    }
  }

  permission(d) {
    const buttons = el('div', { class: 'actions' },
      d.expires_at ? el('div', { class: 'muted' }, 'Unanswered, it is denied at ' + fmtTime(d.expires_at) + '.') : null);
    const opts = d.options && d.options.length ? d.options : [{ id: '', kind: 'allow_once', label: 'Allow' }, { id: '', kind: 'deny_once', label: 'Deny' }];
    for (const o of opts) {
      const decision = String(o.kind).startsWith('allow') ? 'allow' : 'deny';
      append(buttons, [el('button', { type: 'button', class: decision, data: { option: o.id, decision }, onclick: () => {
        const body = { decision };
        if (o.id) body.option_id = o.id;
        this.answer(card, '/permissions/' + enc(d.id), body);
      } }, o.label || o.kind), ' ']);
    }
    const what = d.kind === 'network' ? 'Network access: ' + (d.host || '') + (d.port ? ':' + d.port : '') : d.title;
    const card = this.add(el('div', { class: 'ev request permission', data: { request: d.id, kind: d.kind } },
      el('strong', null, 'Permission requested (' + d.kind + ')'), ' ', what,
      d.kind === 'network' && d.title ? el('div', null, d.title) : null,
      d.detail ? el('div', { class: 'muted detail' }, capText(d.detail)) : null,
      d.path ? el('div', { class: 'path' }, d.path) : null,
      d.process ? el('div', { class: 'muted' }, 'asked by ' + (d.process.command_line || d.process.name || 'pid ' + d.process.pid)) : null,
      d.input !== undefined ? el('pre', { class: 'input' }, capText(JSON.stringify(d.input, null, 2))) : null,
      d.diff ? diffBlock(d.diff) : null,
      buttons, el('div', { class: 'outcome' })));
    this.requests.set(d.id, card);
  }

  question(d) {
    const free = el('input', { type: 'text', class: 'answer', placeholder: 'Your answer', 'aria-label': 'answer' });
    const card = this.add(el('div', { class: 'ev request question', data: { request: d.id } },
      el('strong', null, 'Question'), ' ', d.prompt));
    const actions = el('div', { class: 'actions' },
      (d.options || []).map((o) => [el('button', { type: 'button', data: { option: o.id },
        onclick: () => this.answer(card, '/questions/' + enc(d.id), { option_id: o.id }) }, o.label), ' ']),
      d.free_text || !(d.options || []).length ? [free, ' ', el('button', { type: 'button', class: 'send-answer',
        onclick: () => this.answer(card, '/questions/' + enc(d.id), { answer: free.value }) }, 'Answer'), ' '] : null,
      el('button', { type: 'button', class: 'deny', onclick: () => this.answer(card, '/questions/' + enc(d.id), { cancel: true }) }, 'Decline'));
    append(card, [actions, el('div', { class: 'outcome' })]);
    this.requests.set(d.id, card);
  }

  async answer(card, path, body) {
    const outcome = card.querySelector('.outcome');
    for (const b of card.querySelectorAll('.actions button')) b.disabled = true;
    try {
      await api('POST', sessionPath(this.id) + path, body);
    } catch (e) {
      outcome.textContent = 'Not answered: ' + e.message;
      for (const b of card.querySelectorAll('.actions button')) b.disabled = false;
    }
  }

  resolved(id, text, cls) {
    const card = this.requests.get(id);
    if (!card) return this.add(el('div', { class: 'ev sys' }, text));
    const actions = card.querySelector('.actions');
    if (actions) actions.remove();
    card.classList.add('resolved', 'res-' + cls);
    card.querySelector('.outcome').textContent = text;
  }
}

// readSSE parses a text/event-stream body and calls onMessage with each
// message ({ id, event, data }) until the stream ends.
async function readSSE(body, onMessage) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let msg = { id: '', event: '', data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    // A lone CR at the end may be the first half of a CRLF.
    let end = buf.endsWith('\r') ? buf.length - 1 : buf.length;
    let start = 0;
    for (;;) {
      let nl = -1;
      let len = 1;
      for (let i = start; i < end; i++) {
        const c = buf.charCodeAt(i);
        if (c === 10) { nl = i; break; }
        if (c === 13) { nl = i; if (buf.charCodeAt(i + 1) === 10) len = 2; break; }
      }
      if (nl < 0) break;
      const line = buf.slice(start, nl);
      start = nl + len;
      if (line === '') {
        if (msg.data.length) onMessage({ id: msg.id, event: msg.event, data: msg.data.join('\n') });
        msg = { id: msg.id, event: '', data: [] };
        continue;
      }
      if (line[0] === ':') continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let v = colon < 0 ? '' : line.slice(colon + 1);
      if (v[0] === ' ') v = v.slice(1);
      if (field === 'data') msg.data.push(v);
      else if (field === 'event') msg.event = v;
      else if (field === 'id') msg.id = v;
    }
    buf = buf.slice(start);
  }
}

// ---------------------------------------------------------------- files and diff

// unavailable says what a 404 from an API the daemon may not have yet
// means; other errors are shown as they are.
function unavailable(e, what) {
  if (e.status === 404 && (!e.problem.type || /not-found$/.test(e.problem.type)) && /route/i.test(e.problem.detail || '')) {
    return what + ' is not available on this daemon.';
  }
  return what + ': ' + e.message;
}

class FilesPanel {
  constructor(id) {
    this.id = id;
    this.dir = '.';
    this.list = el('ul', { id: 'file-list', class: 'files' });
    this.where = el('span', { id: 'file-dir', class: 'path' });
    this.msg = el('p', { class: 'muted', id: 'files-msg' });
    this.view = el('div', { id: 'file-view' });
    this.node = el('section', { id: 'tab-files', class: 'tab' },
      el('div', null, 'Directory ', this.where, ' ', el('button', { type: 'button', id: 'files-refresh', onclick: () => this.load() }, 'Refresh')),
      this.msg, this.list, this.view);
  }

  close() {}

  async load(dir = this.dir) {
    this.dir = dir;
    this.where.textContent = dir;
    this.msg.textContent = '';
    let res;
    try {
      res = await api('GET', sessionPath(this.id) + '/files?path=' + enc(dir) + '&depth=1');
    } catch (e) {
      clear(this.list);
      this.msg.textContent = unavailable(e, 'The files API');
      return;
    }
    clear(this.list);
    if (dir !== '.') {
      const up = dir.includes('/') ? dir.slice(0, dir.lastIndexOf('/')) : '.';
      append(this.list, [el('li', null, el('button', { type: 'button', class: 'link', onclick: () => this.load(up) }, '..'))]);
    }
    // Directories first, then by name.
    const entries = (res.entries || []).slice().sort((a, b) =>
      (b.type === 'dir') - (a.type === 'dir') || (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
    if (!entries.length) this.msg.textContent = 'Empty directory.';
    for (const e of entries) {
      const label = e.name + (e.type === 'dir' ? '/' : e.type === 'symlink' ? ' →' : '');
      const open = e.type === 'dir' ? () => this.load(e.path) : e.type === 'file' ? () => this.open(e) : null;
      append(this.list, [el('li', { data: { path: e.path, type: e.type } },
        open ? el('button', { type: 'button', class: 'link', onclick: open }, label) : label,
        el('span', { class: 'muted' }, ' ' + (e.type === 'file' ? e.size + ' B ' : '') + (e.mode || '') + ' ' + fmtTime(e.mtime)))]);
    }
  }

  async open(entry) {
    clear(this.view);
    const title = el('div', { class: 'path' }, entry.path);
    append(this.view, [title]);
    let r;
    try {
      r = await api('GET', sessionPath(this.id) + '/files/content?path=' + enc(entry.path) + '&length=' + MAX_FILE, undefined, { raw: true });
    } catch (e) {
      append(this.view, [el('p', { class: 'error' }, e.message)]);
      return;
    }
    const bytes = new Uint8Array(await r.arrayBuffer());
    if (bytes.includes(0)) {
      append(this.view, [el('p', { class: 'muted' }, 'Binary file, ' + entry.size + ' bytes.')]);
      return;
    }
    const text = new TextDecoder().decode(bytes);
    append(this.view, [el('pre', { id: 'file-content' }, text),
      entry.size > MAX_FILE ? el('p', { class: 'muted' }, 'First ' + MAX_FILE + ' of ' + entry.size + ' bytes.') : null]);
  }
}

class DiffPanel {
  constructor(id) {
    this.id = id;
    this.msg = el('p', { class: 'muted', id: 'diff-msg' });
    this.files = el('ul', { id: 'diff-files', class: 'files' });
    this.body = el('div', { id: 'diff-body' });
    this.node = el('section', { id: 'tab-diff', class: 'tab' },
      el('button', { type: 'button', id: 'diff-refresh', onclick: () => this.load() }, 'Refresh'),
      this.msg, this.files, this.body);
  }

  async load() {
    this.msg.textContent = '';
    clear(this.files);
    clear(this.body);
    let res;
    try {
      res = await api('GET', sessionPath(this.id) + '/diff');
    } catch (e) {
      this.msg.textContent = unavailable(e, 'The diff API');
      return;
    }
    if (!(res.files || []).length) this.msg.textContent = 'No changes.';
    for (const f of res.files || []) append(this.files, [el('li', { data: { path: f.path } }, f.status + ' ' + f.path)]);
    if (res.diff) append(this.body, [diffBlock(res.diff)]);
    if (res.truncated) append(this.body, [el('p', { class: 'muted' }, 'The diff was cut short.')]);
  }
}

// ---------------------------------------------------------------- start

document.getElementById('logout').addEventListener('click', () => forget('Token forgotten.'));
// ---------------------------------------------------------------- console

// Term is a minimal terminal screen: rows by cols cells of text and a
// cursor. It handles printable text, CR, LF, backspace, tab, cursor
// movement (CSI A B C D G H f d) and erasing (CSI J K); every other
// control character and escape sequence (colours, modes, titles) is read
// to its end and dropped. It never builds HTML: the screen is shown as
// the text of one element. The parser keeps its state across writes, and
// bounds what it keeps (parameters, an OSC string) whatever it is fed.
class Term {
  constructor(rows, cols) {
    this.state = 0; // 0 text, 1 after ESC, 2 CSI, 3 OSC or other string, 4 string after ESC
    this.params = '';
    this.resize(rows, cols);
  }

  resize(rows, cols) {
    const old = this.lines || [];
    this.rows = rows;
    this.cols = cols;
    this.lines = [];
    for (let r = 0; r < rows; r++) this.lines.push(this.blank(old[old.length - rows + r]));
    this.r = Math.min(this.r || 0, rows - 1);
    this.c = Math.min(this.c || 0, cols - 1);
  }

  blank(from) {
    const l = new Array(this.cols).fill(' ');
    if (from) for (let i = 0; i < Math.min(from.length, this.cols); i++) l[i] = from[i];
    return l;
  }

  lineFeed() {
    if (this.r < this.rows - 1) { this.r++; return; }
    this.lines.shift();
    this.lines.push(this.blank());
  }

  put(ch) {
    if (this.c >= this.cols) { this.c = 0; this.lineFeed(); }
    this.lines[this.r][this.c++] = ch;
  }

  write(s) {
    for (const ch of s) {
      const code = ch.codePointAt(0);
      switch (this.state) {
        case 0:
          if (code === 27) this.state = 1;
          else if (code === 13) this.c = 0;
          else if (code === 10 || code === 11 || code === 12) this.lineFeed();
          else if (code === 8) this.c = Math.max(0, Math.min(this.c, this.cols) - 1);
          else if (code === 9) this.c = Math.min(this.cols - 1, (Math.floor(this.c / 8) + 1) * 8);
          else if (code >= 32 && code !== 127 && !(code >= 128 && code < 160)) this.put(ch);
          break; // other control characters: ignored
        case 1:
          if (ch === '[') { this.state = 2; this.params = ''; }
          else if (ch === ']' || ch === 'P' || ch === '_' || ch === '^' || ch === 'X') this.state = 3;
          else if (ch === 'c') { this.state = 0; this.resize(this.rows, this.cols); this.clear(2); this.r = this.c = 0; }
          else this.state = 0; // ESC x: dropped
          break;
        case 2:
          if (code >= 0x40 && code <= 0x7e) { this.state = 0; this.csi(ch); }
          else if (code === 27) this.state = 1;
          else if (this.params.length < 32) this.params += ch;
          break;
        case 3: // a string (OSC ...) ends at BEL or ESC \
          if (code === 7) this.state = 0;
          else if (code === 27) this.state = 4;
          break;
        case 4:
          this.state = ch === '\\' ? 0 : 3;
          break;
      }
    }
  }

  csi(final) {
    if (/[^0-9;]/.test(this.params)) return; // private modes (?25h, ...): dropped
    const p = this.params.split(';').map((x) => Math.min(parseInt(x, 10) || 0, 9999));
    const n = Math.max(1, p[0]);
    switch (final) {
      case 'A': this.r = Math.max(0, this.r - n); break;
      case 'B': this.r = Math.min(this.rows - 1, this.r + n); break;
      case 'C': this.c = Math.min(this.cols - 1, this.c + n); break;
      case 'D': this.c = Math.max(0, Math.min(this.c, this.cols) - n); break;
      case 'G': this.c = Math.min(this.cols - 1, n - 1); break;
      case 'd': this.r = Math.min(this.rows - 1, n - 1); break;
      case 'H': case 'f':
        this.r = Math.min(this.rows - 1, n - 1);
        this.c = Math.min(this.cols - 1, Math.max(1, p[1] || 0) - 1);
        break;
      case 'J': this.clear(p[0]); break;
      case 'K': this.erase(p[0]); break;
    }
  }

  clear(mode) {
    for (let r = 0; r < this.rows; r++) {
      if (mode === 2 || mode === 3 || (mode === 0 && r > this.r) || (mode === 1 && r < this.r)) this.lines[r] = this.blank();
    }
    if (mode === 0 || mode === 1) this.erase(mode);
  }

  erase(mode) {
    const l = this.lines[this.r];
    const c = Math.min(this.c, this.cols);
    for (let i = 0; i < this.cols; i++) if (mode === 2 || (mode === 0 && i >= c) || (mode === 1 && i <= c)) l[i] = ' ';
  }

  text() {
    return this.lines.map((l) => l.join('').trimEnd()).join('\n');
  }
}

// keyBytes is what a key sends to a terminal, '' for none.
function keyBytes(ev) {
  const k = ev.key;
  if (ev.ctrlKey && !ev.altKey && k.length === 1) {
    const c = k.toUpperCase().charCodeAt(0);
    return c >= 64 && c <= 95 ? String.fromCharCode(c - 64) : '';
  }
  const named = { Enter: '\r', Backspace: '\x7f', Tab: '\t', Escape: '\x1b', ArrowUp: '\x1b[A', ArrowDown: '\x1b[B',
    ArrowRight: '\x1b[C', ArrowLeft: '\x1b[D', Home: '\x1b[H', End: '\x1b[F', Delete: '\x1b[3~' };
  if (named[k]) return named[k];
  return k.length === 1 && !ev.metaKey ? k : '';
}

// ConsolePanel is an exec console: bash on a pseudo-terminal, in the
// session's sandbox where the daemon serves processes scoped to a session,
// else in a fresh sandbox under the default policy.
class ConsolePanel {
  constructor(id) {
    this.id = id;
    this.base = ''; // the process's API path
    this.abort = null;
    this.queue = '';
    this.sending = false;
    this.term = new Term(24, 100);
    this.screen = el('pre', { id: 'console-screen', class: 'console', tabindex: 0, 'aria-label': 'terminal' });
    this.screen.addEventListener('keydown', (ev) => {
      const b = keyBytes(ev);
      if (!b || !this.base) return;
      ev.preventDefault();
      this.send(b);
    });
    this.msg = el('p', { id: 'console-msg', class: 'muted' },
      'Starts bash on a terminal in the session\'s sandbox (or, where the session has none or cannot give a terminal, a fresh sandbox under the default policy).');
    this.startBtn = el('button', { type: 'button', id: 'console-start', onclick: () => this.start() }, 'Start bash');
    this.sizeSel = el('select', { id: 'console-size', 'aria-label': 'terminal size', onchange: () => this.setSize(this.sizeSel.value) },
      ...['24x80', '24x100', '40x120', '50x160'].map((v) => el('option', { value: v }, v.replace('x', '×'))));
    this.sizeSel.value = '24x100';
    this.node = el('section', { id: 'tab-console', class: 'tab' }, el('div', null, this.startBtn, ' ',
      el('button', { type: 'button', id: 'console-stop', onclick: () => this.stop() }, 'Kill'), ' ', this.sizeSel), this.msg, this.screen);
    this.draw();
  }

  async start() {
    this.close();
    this.term = new Term(this.term.rows, this.term.cols);
    this.draw();
    const body = { argv: ['bash', '-i'], tty: true, rows: this.term.rows, cols: this.term.cols, env: { TERM: 'vt100' } };
    let p;
    try {
      try {
        p = await api('POST', sessionPath(this.id) + '/processes', body);
        this.base = sessionPath(this.id) + '/processes/' + enc(p.id);
      } catch (e) {
        // No session processes here (404, 405), or a session without a
        // sandbox (409): a fresh sandbox under the default policy.
        if (![404, 405, 409].includes(e.status)) throw e;
        p = await api('POST', '/v1/processes', body);
        this.base = '/v1/processes/' + enc(p.id);
      }
    } catch (e) {
      this.msg.textContent = 'Not started: ' + e.message;
      return;
    }
    this.msg.textContent = p.id + ' on a ' + this.term.rows + '×' + this.term.cols + ' terminal (' + (p.sandbox && p.sandbox.runtime) + ')';
    this.screen.focus();
    this.follow();
  }

  async follow() {
    const abort = this.abort = new AbortController();
    let last = 0;
    while (!abort.signal.aborted) {
      try {
        const r = await fetch(this.base + '/stream', {
          headers: headers({ Accept: 'text/event-stream', 'Last-Event-ID': String(last) }),
          credentials: 'omit', cache: 'no-store', referrerPolicy: 'no-referrer', signal: abort.signal,
        });
        if (!r.ok) {
          if (r.status === 401) return forget('The daemon refused the token.');
          this.msg.textContent = 'Console: HTTP ' + r.status;
          return;
        }
        let ended = false;
        await readSSE(r.body, (m) => {
          const seq = Number(m.id);
          if (seq <= last) return;
          last = seq;
          const d = JSON.parse(m.data);
          if (m.event === 'stdout' || m.event === 'stderr') this.term.write(d.data);
          else if (m.event === 'exit') { ended = true; this.msg.textContent += ' — exited (' + (d.signal || d.exit_code) + ')'; }
          this.draw();
        });
        if (ended) break;
      } catch {
        if (abort.signal.aborted) return;
      }
      await new Promise((res) => setTimeout(res, 1000));
    }
  }

  // setSize resizes the screen, and the process's terminal through the
  // route it started on (the session's or /v1/processes).
  async setSize(v) {
    const [rows, cols] = v.split('x').map(Number);
    this.term.resize(rows, cols);
    this.draw();
    if (!this.base) return;
    try {
      await api('POST', this.base + '/resize', { rows, cols });
      this.screen.dataset.size = v;
    } catch (e) {
      this.msg.textContent = 'Not resized: ' + e.message;
    }
  }

  draw() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.screen.textContent = this.term.text(); });
  }

  // send writes keys in order: one request at a time, the rest queued.
  async send(b) {
    this.queue += b;
    if (this.sending) return;
    this.sending = true;
    while (this.queue && this.base) {
      const data = this.queue;
      this.queue = '';
      try {
        await api('POST', this.base + '/stdin', { data });
      } catch (e) {
        this.msg.textContent = 'Input not sent: ' + e.message;
        this.queue = '';
      }
    }
    this.sending = false;
  }

  async stop() {
    if (!this.base) return;
    try { await api('DELETE', this.base); } catch { /* gone already */ }
    this.close();
  }

  close() {
    if (this.abort) this.abort.abort();
    this.abort = null;
    this.base = '';
  }
}

window.addEventListener('hashchange', () => route());
route();
