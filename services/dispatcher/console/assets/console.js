// jetway console: a single page over the dispatcher's HTTP API, with no
// framework and no build step. Every read and action goes through api(),
// which sends the token in the Authorization header only; the token is kept
// in this tab's sessionStorage and never put in a URL.
'use strict';
(() => {
  const TOKEN_KEY = 'jetway.token';
  const main = document.getElementById('main');
  const flashEl = document.getElementById('flash');
  const enc = encodeURIComponent;

  // ---- small helpers ------------------------------------------------------

  // h builds an element; text children are text nodes, so nothing from the
  // API is ever parsed as HTML.
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'class') el.className = v;
      else el.setAttribute(k, v === true ? '' : v);
    }
    for (const kid of kids.flat(3)) {
      if (kid != null && kid !== false) el.append(kid instanceof Node ? kid : String(kid));
    }
    return el;
  }

  // fill replaces el's children, skipping empty ones as h does.
  function fill(el, ...kids) {
    el.replaceChildren(...kids.flat(3).filter((k) => k != null && k !== false).map((k) => (k instanceof Node ? k : String(k))));
  }

  const token = () => sessionStorage.getItem(TOKEN_KEY) || '';

  function flash(msg, info) {
    flashEl.className = info ? 'flash info' : 'flash';
    flashEl.textContent = msg || '';
  }

  const sleep = (ms, signal) => new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });

  function ago(iso) {
    if (!iso || iso.startsWith('0001')) return '';
    const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
    if (s < 60) return Math.round(s) + 's ago';
    if (s < 3600) return Math.round(s / 60) + 'm ago';
    if (s < 86400) return Math.round(s / 3600) + 'h ago';
    return new Date(iso).toLocaleString();
  }

  // at is a moment as a clock time today, or a date and time before: it
  // stays true however long the page shows it.
  function at(iso) {
    if (!iso || iso.startsWith('0001')) return '';
    const d = new Date(iso);
    return d.toDateString() === new Date().toDateString() ? d.toLocaleTimeString() : d.toLocaleString();
  }

  // changed says whether data differs from what was drawn last under key,
  // so a refresh redraws only what changed and never takes the focus or a
  // half-typed value away.
  function differ() {
    const seen = new Map();
    return (key, data) => {
      const sig = JSON.stringify(data);
      if (seen.get(key) === sig) return false;
      seen.set(key, sig);
      return true;
    };
  }

  function elapsed(ms) {
    const s = Math.round(ms / 1000);
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
    return Math.floor(s / 3600) + 'h' + String(Math.floor(s / 60) % 60).padStart(2, '0') + 'm';
  }

  const list = (s) => s.split(',').map((x) => x.trim()).filter(Boolean);
  const badge = (state) => h('span', { class: 'badge ' + state }, state);

  // ---- the API ------------------------------------------------------------

  class APIError extends Error {
    constructor(status, problem, message) {
      super(message);
      this.status = status;
      this.problem = problem || {};
    }
  }

  // api calls the dispatcher and returns the JSON answer; a refusal is an
  // APIError whose message is the problem's detail, in words.
  async function api(method, path, body, signal) {
    const headers = { Authorization: 'Bearer ' + token() };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let res;
    try {
      res = await fetch(path, {
        method, headers, signal, cache: 'no-store',
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new APIError(0, null, 'the dispatcher did not answer (' + e.message + ')');
    }
    if (res.ok) return res.json();
    let p = null;
    try { p = await res.json(); } catch (_) { /* not a problem document */ }
    const msg = (p && (p.detail || p.title)) || res.status + ' ' + res.statusText;
    // A refused token ends the sign-in, except on the sign-in form itself.
    if (res.status === 401 && !document.getElementById('token')) signOut('Signed out: ' + msg);
    throw new APIError(res.status, p, msg);
  }

  // act runs an action and reports its failure in words.
  async function act(what, fn) {
    flash('');
    try {
      return await fn();
    } catch (e) {
      if (e.name !== 'AbortError') flash(what + ' failed: ' + e.message);
      return undefined;
    }
  }

  // page is what one view owns: its timers and streams end with it.
  function newPage() {
    const ctl = new AbortController();
    return {
      signal: ctl.signal,
      stop: () => ctl.abort(),
      // every runs fn now and then ms after each run ends, until the page ends.
      // A failed read is said until a later one succeeds.
      every(ms, fn) {
        (async () => {
          let said = '';
          while (!ctl.signal.aborted) {
            try {
              await fn();
              if (said && flashEl.textContent === said) flash('');
              said = '';
            } catch (e) {
              if (e.name !== 'AbortError' && !ctl.signal.aborted) {
                said = 'Could not refresh this page: ' + e.message;
                flash(said);
              }
            }
            await sleep(ms, ctl.signal);
          }
        })();
      },
    };
  }

  // ---- sign in and out, routing --------------------------------------------

  function signOut(msg) {
    sessionStorage.removeItem(TOKEN_KEY);
    if (current) current.stop();
    current = null;
    location.hash = '#/';
    renderSignIn(msg);
  }

  function renderSignIn(msg) {
    signedInShown = false;
    signedInTenant = '';
    document.getElementById('nav').hidden = true;
    document.getElementById('signout').hidden = true;
    document.getElementById('who').textContent = '';
    flash('');
    const input = h('input', {
      id: 'token', type: 'password', autocomplete: 'off', spellcheck: 'false', required: true,
      'aria-describedby': 'token-hint token-error',
    });
    const err = h('p', { class: 'field-error', id: 'token-error', role: 'alert' }, msg || '');
    const form = h('form', { class: 'card signin', 'aria-labelledby': 'signin-title' },
      h('h1', { id: 'signin-title' }, 'Sign in to jetway'),
      h('div', { class: 'field' },
        h('label', { for: 'token' }, 'API token or sign-in code'),
        input,
        h('span', { class: 'hint', id: 'token-hint' },
          'Run jetway console for a one-time sign-in link, or paste a sign-in code or a bearer token ' +
          '(jetway dev prints where its tokens are). The token is kept in this browser tab only and sent in the Authorization header.'),
        err),
      h('button', { class: 'primary', type: 'submit' }, 'Sign in'));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const typed = input.value.trim();
      if (typed.startsWith(CODE_PREFIX)) {
        input.value = '';
        await signInWithCode(typed);
        return;
      }
      sessionStorage.setItem(TOKEN_KEY, typed);
      let home = '#/sessions';
      try {
        await api('GET', '/v1/sessions');
      } catch (ex) {
        // An operator token of no tenant has no sessions, only the cluster.
        const operator = ex.status === 403 && await api('GET', '/v1/cluster').then(() => true, () => false);
        if (!operator) {
          sessionStorage.removeItem(TOKEN_KEY);
          err.textContent = 'Sign-in failed: ' + ex.message;
          input.setAttribute('aria-invalid', 'true');
          input.focus();
          return;
        }
        home = '#/cluster';
      }
      input.value = '';
      const target = location.hash === '' || location.hash === '#/' || home === '#/cluster' ? home : location.hash;
      if (location.hash !== target) location.hash = target; // the hashchange routes
      else route();
    });
    fill(main, form);
    input.focus();
  }

  let current = null;
  let signedInShown = false;
  // signedInTenant is the tenant of the token the tab signed in with, once
  // /v1/whoami has said it ('' until then, or for a token of no tenant).
  let signedInTenant = '';

  // showSignedIn shows the navigation, and the cluster link to operators.
  async function showSignedIn() {
    document.getElementById('nav').hidden = false;
    document.getElementById('signout').hidden = false;
    const whoEl = document.getElementById('who');
    if (signedInShown) return;
    whoEl.textContent = 'signed in';
    signedInShown = true;
    // The header says whose token this is: a person with several tokens
    // (tenant, admin, operator) sees which one the page acts with.
    api('GET', '/v1/whoami').then((w) => {
      signedInTenant = w.tenant || '';
      whoEl.textContent = w.tenant ? `tenant ${w.tenant} · ${w.role}` : `${w.role} (no tenant)`;
      whoEl.title = 'The token this tab signed in with';
    }, () => { /* an older dispatcher: "signed in" stays */ });
    try {
      await api('GET', '/v1/cluster');
      document.getElementById('nav-cluster').hidden = false;
    } catch (_) { /* not an operator: no cluster link */ }
  }

  // ---- one-time sign-in links ---------------------------------------------
  //
  // `jetway console` prints <base>/#code=<code>. The code is in the fragment,
  // which the browser never sends to a server; the page takes it out of the
  // address bar at once (replaceState, so no history entry keeps it either),
  // trades it for the token in a POST body, and keeps the token as it keeps
  // a pasted one.

  const CODE_PREFIX = 'jwsi_';

  // codeInAddress is the sign-in code in the address's fragment, removed
  // from the address as it is read; '' when there is none.
  function codeInAddress() {
    const m = /^#code=([^&]*)/.exec(location.hash);
    if (!m) return '';
    history.replaceState(null, '', location.pathname + location.search);
    return decodeURIComponent(m[1]);
  }

  async function signInWithCode(code) {
    if (current) current.stop();
    current = null;
    sessionStorage.removeItem(TOKEN_KEY);
    signedInShown = false;
    signedInTenant = '';
    fill(main, h('p', { class: 'card', role: 'status' }, 'Signing in…'));
    let res;
    try {
      res = await fetch('/v1/signin', {
        method: 'POST', cache: 'no-store',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ code }),
      });
    } catch (e) {
      renderSignIn('Sign-in failed: the dispatcher did not answer (' + e.message + ')');
      return;
    }
    let body = null;
    try { body = await res.json(); } catch (_) { /* not JSON */ }
    if (!res.ok || !body || !body.token) {
      const why = (body && (body.detail || body.title)) || res.status + ' ' + res.statusText;
      renderSignIn('This sign-in link did not work: ' + why);
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, body.token);
    const home = body.tenant ? '#/sessions' : '#/cluster';
    if (location.hash !== home) location.hash = home; // the hashchange routes
    else route();
  }

  function route() {
    const code = codeInAddress();
    if (code) { signInWithCode(code); return; }
    if (current) current.stop();
    current = null;
    flash('');
    if (!token()) {
      signedInShown = false;
      signedInTenant = '';
      if (!document.getElementById('token')) renderSignIn();
      return;
    }
    showSignedIn();
    const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
    for (const a of document.querySelectorAll('#nav a')) {
      const on = a.getAttribute('href').slice(2) === (parts[0] === 'session' ? 'sessions' : parts[0] === 'new-agent' ? 'agents' : parts[0]);
      if (on) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    }
    if (parts[0] === 'session' && parts[1]) current = sessionPage(parts[1]);
    else if (parts[0] === 'agents' && parts[1]) current = agentPage(parts[1], false);
    else if (parts[0] === 'new-agent') current = agentPage('', true);
    else if (parts[0] === 'agents') current = agentsPage();
    else if (parts[0] === 'cluster') current = clusterPage();
    else current = sessionsPage();
    main.focus({ preventScroll: true });
  }

  // ---- sessions -------------------------------------------------------------

  function sessionsPage() {
    const page = newPage();
    const q = h('input', { id: 'q', type: 'search', placeholder: 'name or agent' });
    const state = h('select', { id: 'state' },
      ['', 'idle', 'waiting', 'running', 'interrupted', 'stopped'].map((s) => h('option', { value: s }, s || 'any')));
    const waitList = h('div', { id: 'waiting-list' });
    const open = h('input', { id: 'open-session', placeholder: 'session name', required: true, pattern: '[A-Za-z0-9_-]{1,64}' });
    const banner = h('div');
    const body = h('tbody');
    let rows = [];
    let stop = {};
    let waiting = [];
    const changed = differ();

    const openForm = h('form', { class: 'row', 'aria-label': 'Open a session' },
      h('label', { for: 'open-session' }, 'Open or start a session'), open,
      h('button', { type: 'submit' }, 'Open'));
    openForm.addEventListener('submit', (e) => {
      e.preventDefault();
      location.hash = '#/session/' + enc(open.value.trim());
    });

    function render() {
      const needle = q.value.trim().toLowerCase();
      const shown = rows.filter((r) => (!state.value || r.state === state.value) &&
        (!needle || r.session.toLowerCase().includes(needle) || r.agent.toLowerCase().includes(needle)));
      fill(body, ...shown.map((r) => h('tr', {},
        h('td', {}, h('a', { href: '#/session/' + enc(r.session) }, r.session)),
        h('td', {}, badge(r.state)),
        h('td', {}, r.agent),
        h('td', {}, r.stopped ? h('span', { class: 'badge stop' }, 'on') : 'off'),
        h('td', { class: 'hide-narrow' }, r.runs),
        h('td', {}, at(r.updated)))));
      if (!shown.length) {
        body.append(h('tr', {}, h('td', { colspan: 6, class: 'muted' },
          rows.length ? 'No session matches the filter.' : 'No sessions yet: open one above and send it a line.')));
      }
      const on = [];
      if (stop.global_stop) on.push('everywhere (global)');
      if (stop.ground_stop) on.push('for every session of this tenant');
      fill(banner, ...(on.length ? [h('div', { class: 'banner', role: 'status' }, 'Ground Stop is on ' + on.join(' and ') + '.')] : []));
      fill(waitList, ...(waiting.length ? [h('div', { class: 'card' }, h('h2', {}, 'Waiting for you'),
        h('ul', { class: 'small' }, waiting.map((a) => h('li', {},
          h('a', { href: '#/session/' + enc(a.session) }, a.session), ' · ',
          a.kind === 'question' ? 'asks: ' + a.question : a.tool + ' ' + JSON.stringify(a.input || {}),
          ' · ', a.id))))] : []));
    }

    q.addEventListener('input', render);
    state.addEventListener('change', render);
    fill(main,
      h('h1', {}, 'Sessions'), banner, waitList,
      h('div', { class: 'card' }, openForm),
      h('div', { class: 'card' },
        h('div', { class: 'filter', role: 'search' },
          h('label', { for: 'q' }, 'Search'), q, h('label', { for: 'state' }, 'State'), state),
        h('div', { class: 'table-wrap' }, h('table', { 'aria-label': 'Sessions' },
          h('thead', {}, h('tr', {}, h('th', {}, 'Session'), h('th', {}, 'State'), h('th', {}, 'Agent'),
            h('th', {}, 'Ground Stop'), h('th', { class: 'hide-narrow' }, 'Runs'), h('th', {}, 'Last activity'))),
          body))));

    page.every(3000, async () => {
      const [list, st, ap] = await Promise.all([
        api('GET', '/v1/sessions', undefined, page.signal),
        api('GET', '/v1/stop?scope=tenant', undefined, page.signal).catch(() => ({})),
        api('GET', '/v1/approvals', undefined, page.signal).catch(() => ({ approvals: [] })),
      ]);
      stop = st;
      waiting = ap.approvals || [];
      const asked = new Set(waiting.map((a) => a.session));
      const stopped = new Set((st.sessions || []).map((s) => s.scope.split('/')[1]));
      rows = list.sessions.map((s) => {
        const rec = (s.record && typeof s.record === 'object') ? s.record : {};
        return {
          session: s.session, state: (rec.state || 'idle') === 'idle' && asked.has(s.session) ? 'waiting' : rec.state || 'idle',
          agent: rec.agent || 'default',
          runs: rec.runs || 0, updated: s.updated,
          stopped: stopped.has(s.session) || st.ground_stop || st.global_stop,
        };
      }).sort((a, b) => Date.parse(b.updated) - Date.parse(a.updated));
      if (changed('rows', [rows, stop, waiting])) render();
    });
    return page;
  }

  // ---- transcript rendering ---------------------------------------------------

  // renderer draws runs, text, tool calls and notices into root; the history
  // and the live stream each have one. The live one shares the history's
  // runs and tool calls (shared): a page opened while a run goes on has the
  // run's frame and its pending tool calls from the history, and the
  // stream's rest of that run belongs in them — drawn apart, a pending
  // "tool shell" stayed in the frame for ever and "tool shell — done" and
  // the rest of the run came outside it.
  function renderer(root, shared) {
    const runs = shared ? shared.runs : new Map();
    const tools = shared ? shared.tools : new Map();
    let text = null;
    const into = (run) => (run && runs.has(run) ? runs.get(run).el : root);
    return {
      runs, tools,
      runStarted(run, head, time) {
        if (runs.has(run)) { text = null; return; } // the history drew it
        const el = h('section', { class: 'run', 'aria-label': 'run ' + run }, h('div', { class: 'run-head' }, head));
        root.append(el);
        runs.set(run, { el, time, inTok: 0, outTok: 0 });
        text = null;
      },
      text(run, s) {
        if (!text || text.dataset.run !== (run || '')) {
          text = h('div', { class: 'entry assistant text', 'data-run': run || '' });
          into(run).append(text);
        }
        text.append(s);
      },
      you(s, run) {
        text = null;
        const el = h('div', { class: 'entry you' }, h('span', { class: 'who-said' }, 'you:'), h('span', { class: 'text' }, s));
        into(run).append(el);
        return el;
      },
      notice(s, run) { text = null; const el = h('div', { class: 'entry notice' }, s); into(run).append(el); return el; },
      headline(s, run) { text = null; into(run).append(h('div', { class: 'entry headline' }, s)); },
      toolUse(run, id, name, input) {
        text = null;
        const args = input === undefined || input === null ? '' : JSON.stringify(input, null, 2);
        if (tools.has(id)) return; // drawn already, by the history or the stream
        const el = h('details', { class: 'tool' }, h('summary', {}, 'tool ' + name), h('div', { class: 'small muted' }, 'arguments'), h('pre', {}, args));
        tools.set(id, el);
        into(run).append(el);
      },
      toolResult(run, id, name, result, isError) {
        text = null;
        let el = tools.get(id);
        if (!el) {
          el = h('details', { class: 'tool' }, h('summary', {}, 'tool ' + (name || id)));
          into(run).append(el);
        }
        if (el.dataset.ended) return; // its result is drawn already
        el.dataset.ended = 'yes';
        if (isError) el.classList.add('error');
        el.querySelector('summary').append(isError ? ' — failed' : ' — done');
        el.append(h('div', { class: 'small muted' }, 'result'), h('pre', {}, result || ''));
      },
      usage(run, u) {
        const r = runs.get(run);
        if (r && u) { r.inTok += u.input_tokens || 0; r.outTok += u.output_tokens || 0; }
      },
      runEnded(run, reason, ms, usage, extra) {
        text = null;
        const r = runs.get(run) || {};
        const inTok = usage ? usage.input_tokens : r.inTok || 0;
        const outTok = usage ? usage.output_tokens : r.outTok || 0;
        const took = ms != null ? ms : (r.time ? Date.parse(extra.time) - Date.parse(r.time) : 0);
        into(run).append(h('div', { class: 'run-end' },
          `run ${run} ${reason || 'ended'} after ${elapsed(took)} · ${inTok} tokens in, ${outTok} out` +
          (extra.turns ? ` · ${extra.turns} turn${extra.turns === 1 ? '' : 's'}` : '') +
          (extra.error ? ': ' + extra.error : '')));
      },
    };
  }

  // drawEntry renders one transcript entry of the history API.
  function drawEntry(r, e) {
    if (e.kind === 'run_started') r.runStarted(e.run, `run ${e.run} started (${e.cause || 'dispatch'})`, e.time);
    if (e.kind === 'run_ended') {
      r.runEnded(e.run, e.reason, null, null, { time: e.time, error: e.error });
      // The MCP servers the run had no tools of, and why (docs/MCP.md).
      for (const m of e.mcp || []) r.notice(`MCP server ${m.server} (${m.transport}) ${m.state}: ${m.error || '-'}`, e.run);
      return;
    }
    if (e.kind === 'refused') { r.notice(`refused ${e.type || 'event'}: ${e.reason}`, e.run); return; }
    // A sub-agent's end taken by the agent_start call that waited for it:
    // delivered, not refused.
    if (e.kind === 'answered') { r.headline(`${e.type || 'event'} ${e.reason}`, e.run); return; }
    if (e.kind === 'boundary') { r.headline('earlier history was compacted into a summary', e.run); return; }
    r.usage(e.run, e.usage);
    for (const b of e.content || []) {
      if (b.type === 'text' && e.role === 'assistant') r.text(e.run, b.text);
      else if (b.type === 'text' && e.message_kind) r.notice(b.text, e.run);
      // A run started by a job, an event or a sub-agent: not the person's words.
      else if (b.type === 'text' && (e.from || []).some((f) => f !== 'person')) r.notice(`${[...new Set(e.from)].join('+')}: ${b.text}`, e.run);
      else if (b.type === 'text') r.you(b.text, e.run);
      else if (b.type === 'tool_use') r.toolUse(e.run, b.id, b.name, b.input);
      else if (b.type === 'tool_result') r.toolResult(e.run, b.tool_use_id, '', b.content, b.is_error);
    }
  }

  // drawEvent renders one event of the live stream.
  function drawEvent(r, ev) {
    const d = ev.data || {};
    switch (ev.type) {
      case 'io.jetway.run.started':
        r.runStarted(d.run, `run ${d.run} started (${d.cause})` + (d.agent && d.agent !== 'default' ? ' · agent ' + d.agent : '') + (d.model ? ' · ' + d.model : ''), new Date().toISOString());
        break;
      case 'io.jetway.run.text': r.text(d.run, d.text); break;
      case 'io.jetway.run.tool_use': r.toolUse(d.run, d.id, d.name, d.input); break;
      case 'io.jetway.run.tool_result': r.toolResult(d.run, d.id, d.name, d.summary, d.is_error); break;
      case 'io.jetway.run.refused': r.notice(`refused ${d.type || 'event'}: ${d.reason}`); break;
      case 'io.jetway.run.delivered': r.headline(`${(d.events || []).length} waiting event(s) reached the running model`, d.run); break;
      case 'io.jetway.run.ended': r.runEnded(d.run, d.reason, d.elapsed_ms, d.usage, { turns: d.turns, error: d.error }); break;
      case 'io.jetway.headline':
        if (d.about !== 'io.jetway.run.started' && d.about !== 'io.jetway.run.ended') r.headline(d.text);
        break;
      default: break;
    }
  }

  // parseFrame reads one Server-Sent Events frame.
  function parseFrame(frame) {
    let id = null, type = 'message';
    const data = [];
    for (const line of frame.split('\n')) {
      if (!line || line[0] === ':') continue;
      const c = line.indexOf(':');
      const field = c < 0 ? line : line.slice(0, c);
      let v = c < 0 ? '' : line.slice(c + 1);
      if (v[0] === ' ') v = v.slice(1);
      if (field === 'id') id = v;
      else if (field === 'event') type = v;
      else if (field === 'data') data.push(v);
    }
    if (!data.length) return null;
    let parsed = data.join('\n');
    try { parsed = JSON.parse(parsed); } catch (_) { /* keep the text */ }
    return { id, type, data: parsed };
  }

  // follow reads a session's stream with fetch, which, unlike EventSource,
  // can send the Authorization header. After a drop it reconnects with
  // Last-Event-ID, so the server sends only what came after the last event
  // drawn; an event at or below that id is never drawn twice.
  async function follow(session, signal, onEvent, onState) {
    let last = null;
    let delay = 1000;
    while (!signal.aborted) {
      try {
        const headers = { Authorization: 'Bearer ' + token(), Accept: 'text/event-stream' };
        let url = '/v1/sessions/' + enc(session) + '/stream';
        if (last !== null) headers['Last-Event-ID'] = last;
        else url += '?from=new';
        const res = await fetch(url, { headers, signal, cache: 'no-store' });
        if (!res.ok) {
          const p = await res.json().catch(() => null);
          if (res.status === 401) { signOut('Signed out: ' + ((p && p.detail) || 'token refused')); return; }
          throw new Error((p && p.detail) || res.status + ' ' + res.statusText);
        }
        onState('live', '', last === null);
        delay = 1000;
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const ev = parseFrame(buf.slice(0, i));
            buf = buf.slice(i + 2);
            if (!ev || ev.id === null) continue;
            if (last !== null && Number(ev.id) <= Number(last)) continue;
            last = ev.id;
            onEvent(ev);
          }
        }
        throw new Error('the stream ended');
      } catch (e) {
        if (signal.aborted) return;
        onState('down', e.message);
        await sleep(delay, signal);
        delay = Math.min(delay * 2, 8000);
      }
    }
  }

  // ---- the timeline -----------------------------------------------------------

  // The timeline draws a window of a session's runs as bars on a time axis:
  // each run, its model calls and tool calls, and the background jobs and
  // sub-agents started meanwhile. It is built from what the page reads
  // anyway: the transcript's entries (each has its time: a model call runs
  // from the run's previous entry to the assistant message, a tool call
  // from that message to its result), the jobs and children of the detail.
  // It is one SVG whatever the session's length: a lane's bars closer than
  // a few pixels merge into one that counts them, so a 2000-turn run is at
  // most TL_SEGS bars a lane; idle time between bars longer than a twentieth
  // of the window is cut out of the axis and marked.
  const TL_RUNS = 5; // runs in a window
  const TL_SEGS = 120; // most bars a lane draws
  const TL_ROWS = 6; // most job rows and sub-agent rows
  const SVGNS = 'http://www.w3.org/2000/svg';

  function svg(tag, attrs, ...kids) {
    const el = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v != null && v !== false) el.setAttribute(k, v);
    for (const kid of kids.flat(2)) if (kid != null && kid !== false) el.append(kid instanceof Node ? kid : String(kid));
    return el;
  }

  // dur is a duration short enough to read on a bar: 340 ms, 2.4s, 3m05s.
  function dur(ms) {
    if (!(ms >= 0)) return '?';
    if (ms < 1000) return Math.round(ms) + ' ms';
    if (ms < 10000) return (ms / 1000).toFixed(1) + 's';
    return elapsed(ms);
  }
  const toks = (i, o) => `${i} tokens in, ${o} out`;
  const ms = (iso) => (iso && !iso.startsWith('0001') ? Date.parse(iso) : NaN);

  function timeline(base, signal) {
    const runs = new Map();
    const order = [];
    const toolAt = new Map();
    let seen = 0; // the last transcript entry taken
    let jobs = [];
    let kids = [];
    let hi = null; // the window ends before run hi; null follows the latest
    let queued = false;

    const detail = h('p', { class: 'small tl-detail', id: 'tl-detail', 'aria-live': 'polite' },
      'Point at or tap a bar for its duration and tokens.');
    const range = h('span', { class: 'small muted', id: 'tl-range' });
    const earlier = h('button', { type: 'button', id: 'tl-earlier', onclick: () => move(-1) }, '◀ Earlier runs');
    const later = h('button', { type: 'button', id: 'tl-later', onclick: () => move(1) }, 'Later runs ▶');
    const pic = h('div', { class: 'tl-scroll', id: 'tl-pic' });
    const el = h('section', { class: 'card timeline', id: 'timeline', 'aria-labelledby': 'h-tl' },
      h('div', { class: 'row' }, h('h2', { id: 'h-tl' }, 'Timeline'), range,
        h('span', { class: 'row push' }, earlier, later)),
      pic, detail);
    const show = (ev) => {
      const b = ev.target.closest && ev.target.closest('[data-tip]');
      if (b) detail.textContent = b.dataset.tip;
    };
    pic.addEventListener('mouseover', show);
    pic.addEventListener('click', show);
    window.addEventListener('resize', () => redraw(), { signal });

    function move(dir) {
      const n = order.length;
      const cur = hi == null ? n : hi;
      const next = Math.max(Math.min(TL_RUNS, n), cur + dir * TL_RUNS);
      hi = next >= n ? null : next;
      redraw();
    }

    function redraw() {
      if (queued) return;
      queued = true;
      requestAnimationFrame(() => { queued = false; draw(); });
    }

    function run(id, t) {
      let r = runs.get(id);
      if (!r) {
        r = { id, start: t, end: NaN, last: t, cause: '', reason: '', model: [], tools: [], inTok: 0, outTok: 0 };
        runs.set(id, r);
        order.push(id);
      }
      return r;
    }

    // add takes one transcript entry, once, in the order they were recorded.
    function add(e) {
      if (e.id <= seen) return;
      seen = e.id;
      if (!e.run) return;
      const t = ms(e.time);
      if (e.kind === 'run_started') {
        const r = run(e.run, t);
        Object.assign(r, { start: t, last: t, cause: e.cause || 'dispatch', agent: e.agent });
        return;
      }
      const r = run(e.run, t);
      if (e.kind === 'run_ended') {
        r.end = t;
        r.reason = e.reason || 'ended';
        r.error = e.error;
        for (const c of r.tools) if (isNaN(c.end)) c.end = t;
        return;
      }
      if (e.kind !== 'message') return;
      if (e.role === 'assistant') {
        const u = e.usage || {};
        r.model.push({ start: r.last, end: t, inTok: u.input_tokens || 0, outTok: u.output_tokens || 0 });
        r.inTok += u.input_tokens || 0;
        r.outTok += u.output_tokens || 0;
        for (const b of e.content || []) {
          if (b.type !== 'tool_use') continue;
          const c = { start: t, end: NaN, name: b.name, error: false };
          r.tools.push(c);
          toolAt.set(b.id, c);
        }
      } else {
        for (const b of e.content || []) {
          const c = b.type === 'tool_result' && toolAt.get(b.tool_use_id);
          if (c) { c.end = t; c.error = !!b.is_error; toolAt.delete(b.tool_use_id); }
        }
      }
      r.last = t;
    }

    const sig = differ();
    function setJobs(js) {
      const v = js.map((j) => ({ id: String(j.id), start: ms(j.started), end: ms(j.ended), status: j.status,
        exit: j.exit_code, what: j.command || j.summary || j.line || '', run: j.run_id })).filter((j) => !isNaN(j.start));
      if (sig('jobs', v)) { jobs = v; redraw(); }
    }
    function setChildren(cs) {
      const v = (cs || []).filter((c) => typeof c === 'object').map((c) => ({ id: c.session, start: ms(c.started),
        end: c.state === 'running' || !c.runs ? NaN : ms(c.since), state: c.state, agent: c.agent, number: c.number,
        reason: c.reason })).filter((c) => !isNaN(c.start));
      if (sig('kids', v)) { kids = v; redraw(); }
    }

    // live says whether the window shows something still going on, whose
    // bar grows with the clock.
    let open = false;

    function draw() {
      const n = order.length;
      const top = hi == null ? n : Math.min(hi, n);
      const lo = Math.max(0, top - TL_RUNS);
      const win = order.slice(lo, top).map((id) => runs.get(id));
      earlier.disabled = lo === 0;
      later.disabled = hi == null;
      range.textContent = n ? (top - lo === 1 ? `run ${top} of ${n}` : `runs ${lo + 1}–${top} of ${n}`) + (hi == null ? ' · the latest' : '') : '';
      if (!n) { fill(pic, h('p', { class: 'small muted' }, 'No runs yet.')); open = false; return; }
      const now = Date.now();
      const endOf = (x) => (isNaN(x.end) ? now : Math.max(x.end, x.start));
      const t0 = win[0].start;
      // Jobs and sub-agents started while the window's runs went on (up to
      // the next run) are drawn; those started before and still going then
      // are drawn from the left edge, without stretching the axis.
      const nextRun = hi == null ? null : runs.get(order[top]);
      const until = nextRun ? nextRun.start : Infinity;
      const inWin = (i) => i.start < until && endOf(i) >= t0;
      // A run's foreground command is its tool call's bar; it is a job of
      // its own only once it outlives the run.
      const fg = (j) => { const r = j.run && runs.get(j.run); return r && (isNaN(r.end) || endOf(j) <= r.end); };
      const wj = jobs.filter((j) => inWin(j) && !fg(j)).sort((a, b) => a.start - b.start);
      const wk = kids.filter(inWin).sort((a, b) => a.start - b.start);
      open = win.some((r) => isNaN(r.end)) || wj.some((j) => isNaN(j.end)) || wk.some((k) => isNaN(k.end));

      // The axis: the spans of the runs and of what they started, with long
      // idle gaps between them cut out.
      const spans = [...win, ...wj.filter((j) => j.start >= t0), ...wk.filter((k) => k.start >= t0)]
        .map((x) => [Math.max(x.start, t0), endOf(x)]).sort((a, b) => a[0] - b[0]);
      const segs = [];
      for (const [a, b] of spans) {
        const s = segs[segs.length - 1];
        if (s && a <= s[1]) s[1] = Math.max(s[1], b); else segs.push([a, b]);
      }
      let active = segs.reduce((sum, s) => sum + s[1] - s[0], 0);
      const cut = Math.max(active / 20, 1000);
      for (let i = segs.length - 1; i > 0; i--) {
        if (segs[i][0] - segs[i - 1][1] <= cut) { segs[i - 1][1] = segs[i][1]; segs.splice(i, 1); }
      }
      active = Math.max(segs.reduce((sum, s) => sum + s[1] - s[0], 0), 1);
      const narrow = pic.clientWidth < 520;
      const W = Math.max(pic.clientWidth || 0, 300);
      const LBL = narrow ? 70 : 96;
      const BRK = 18;
      const x0 = LBL + 4;
      const plot = W - x0 - 10;
      const k = Math.max(plot - BRK * (segs.length - 1), 40) / active;
      const segX = [];
      let acc = x0;
      for (const s of segs) { segX.push(acc); acc += (s[1] - s[0]) * k + BRK; }
      const x = (t) => {
        for (let i = segs.length - 1; i >= 0; i--) {
          if (t >= segs[i][0]) return Math.min(segX[i] + Math.min(t - segs[i][0], segs[i][1] - segs[i][0]) * k + (t > segs[i][1] ? BRK / 2 : 0), x0 + plot);
        }
        return x0;
      };

      const ROW = 22;
      const BAR = 14;
      const rows = [];
      const out = [];
      // lane draws items on a row, merging those closer than a few pixels
      // into one bar whose tip counts them.
      const lane = (label, kind, items, tip, extra) => {
        const y = 6 + rows.length * ROW;
        rows.push(svg('text', { x: LBL, y: y + BAR - 3, class: 'tl-label', 'text-anchor': 'end' }, label));
        const gap = Math.max(plot / TL_SEGS, 1);
        let cur = null;
        const flush = () => {
          if (!cur) return;
          const t = tip(cur.items);
          out.push(svg('rect', Object.assign({
            x: cur.x1.toFixed(1), y, width: Math.max(cur.x2 - cur.x1, 2).toFixed(1), height: BAR, rx: 3,
            class: 'tl-bar tl-' + kind + (cur.items.some((i) => i.error || i.bad) ? ' tl-bad' : '') + (cur.items.some((i) => isNaN(i.end)) ? ' tl-open' : ''),
            'data-kind': kind, 'data-count': cur.items.length, 'data-tip': t,
          }, extra ? extra(cur.items) : {}), svg('title', {}, t)));
          cur = null;
        };
        for (const it of items) {
          const a = x(Math.max(it.start, t0));
          const b = Math.max(x(endOf(it)), a + 2);
          if (cur && a <= cur.x2 + gap) { cur.x2 = Math.max(cur.x2, b); cur.items.push(it); continue; }
          flush();
          cur = { x1: a, x2: b, items: [it] };
        }
        flush();
      };
      const took = (i) => endOf(i) - i.start;
      const sum = (is, f) => is.reduce((s, i) => s + f(i), 0);
      const going = (i) => (isNaN(i.end) ? 'running for ' : '') + dur(took(i));

      win.forEach((r) => { r.bad = /error|aborted|timeout|failed|too_long|limit/.test(r.reason || ''); });
      lane('runs', 'run', win, (is) => is.map((r) => `run ${r.id} (${r.cause || 'dispatch'})` + (r.agent && r.agent !== 'default' ? ' as ' + r.agent : '') +
        ` · ${isNaN(r.end) ? 'running for ' + dur(took(r)) : (r.reason || 'ended') + ' after ' + dur(took(r))}` +
        ` · ${r.model.length} model call${r.model.length === 1 ? '' : 's'}, ${r.tools.length} tool call${r.tools.length === 1 ? '' : 's'} · ${toks(r.inTok, r.outTok)}` +
        (r.error ? ': ' + r.error : '')).join('\n'), (is) => ({ 'data-run': is.map((r) => r.id).join(' ') }));
      const calls = win.flatMap((r) => r.model);
      lane('model calls', 'model', calls, (is) => (is.length === 1
        ? `model call · ${going(is[0])} · ${toks(is[0].inTok, is[0].outTok)}`
        : `${is.length} model calls · ${dur(sum(is, took))} in all · ${toks(sum(is, (i) => i.inTok), sum(is, (i) => i.outTok))}`));
      const tools = win.flatMap((r) => r.tools).sort((a, b) => a.start - b.start);
      lane('tool calls', 'tool', tools, (is) => {
        if (is.length === 1) return `tool ${is[0].name} · ${going(is[0])}` + (is[0].error ? ' · failed' : '');
        const by = new Map();
        for (const i of is) by.set(i.name, (by.get(i.name) || 0) + 1);
        return `${is.length} tool calls (${[...by].map(([nm, c]) => nm + ' ×' + c).join(', ')}) · ${dur(sum(is, took))} in all` +
          (is.some((i) => i.error) ? ` · ${is.filter((i) => i.error).length} failed` : '');
      }, (is) => ({ 'data-name': [...new Set(is.map((i) => i.name))].join(' ') }));
      const jobRows = wj.slice(-TL_ROWS);
      for (const j of jobRows) {
        j.bad = j.status !== 'running' && j.status !== 'exited' || (j.status === 'exited' && j.exit);
        lane('job ' + j.id, 'job', [j], ([i]) => `job ${i.id} · ${i.what} · ${i.status}${i.status === 'exited' ? ' (exit ' + (i.exit || 0) + ')' : ''} · ${going(i)}`,
          () => ({ 'data-job': j.id }));
      }
      const kidRows = wk.slice(-TL_ROWS);
      for (const c of kidRows) {
        c.bad = c.state === 'interrupted' || c.state === 'stopped';
        lane('agent ' + (c.number || ''), 'agent', [c], ([i]) => `sub-agent ${i.number || ''} (${i.agent || 'default'}) · session ${i.id} · ${i.state}` +
          (i.reason ? ' (' + i.reason + ')' : '') + ` · ${going(i)}`, () => ({ 'data-session': c.id }));
      }
      const H = 6 + rows.length * ROW + 22;
      // The axis: a tick at each segment's start and the window's end, the
      // cut-out gaps marked with how long they were.
      const axis = [svg('line', { x1: x0, x2: x0 + plot, y1: H - 20, y2: H - 20, class: 'tl-axis' })];
      // Ticks in between go a round step apart; a step under a millisecond
      // gets the decimals that tell its ticks apart (+0.2 ms, +0.4 ms).
      const raw = 100 / k;
      const pow = 10 ** Math.floor(Math.log10(raw));
      const step = [1, 2, 5, 10].map((m) => m * pow).find((v) => v >= raw);
      const prec = step < 1 ? Math.min(3, Math.ceil(-Math.log10(step) - 1e-9)) : 0;
      const tick = (v) => '+' + (prec && v < 1000 ? v.toFixed(prec) + ' ms' : dur(v));
      segs.forEach((s, i) => {
        const at = segX[i];
        axis.push(svg('text', { x: at, y: H - 6, class: 'tl-tick', 'text-anchor': i ? 'middle' : 'start' }, i ? tick(s[0] - t0) : clock(t0)));
        if (i) {
          const gx = at - BRK / 2;
          axis.push(svg('line', { x1: gx, x2: gx, y1: 2, y2: H - 20, class: 'tl-break' },
            svg('title', {}, dur(s[0] - segs[i - 1][1]) + ' with nothing going on, left out')));
        }
      });
      axis.push(svg('text', { x: x0 + plot, y: H - 6, class: 'tl-tick', 'text-anchor': 'end' }, tick(segs[segs.length - 1][1] - t0)));
      // The ticks in between, where they have room.
      segs.forEach((s, i) => {
        for (let t = Math.ceil((s[0] - t0) / step) * step + t0; t < s[1]; t += step) {
          const at = x(t);
          if (at - segX[i] < 70 || x0 + plot - at < 60 || (segX[i + 1] && segX[i + 1] - at < 70)) continue;
          axis.push(svg('line', { x1: at, x2: at, y1: H - 23, y2: H - 17, class: 'tl-axis' }),
            svg('text', { x: at, y: H - 6, class: 'tl-tick', 'text-anchor': 'middle' }, tick(t - t0)));
        }
      });
      const pictured = svg('svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: 'tl-svg', role: 'img',
        'aria-label': `Timeline of ${range.textContent}: ${win.length} run(s), ${calls.length} model call(s), ${tools.length} tool call(s), ${jobRows.length} job(s), ${kidRows.length} sub-agent(s)` },
      rows, axis, out);
      fill(pic, pictured);
    }

    const clock = (t) => new Date(t).toLocaleTimeString();

    // sync reads the entries recorded after the last one taken, and only
    // those: the stream says something happened, the transcript says when.
    let syncing = null;
    let again = false;
    let stale = false; // a read failed: the next tick tries again
    async function sync() {
      if (syncing) { again = true; return syncing; }
      syncing = (async () => {
        try {
          do {
            again = false;
            for (let i = 1; ; i++) {
              const pg = await api('GET', `${base}/transcript?after=${seen}&limit=200`, undefined, signal);
              pg.entries.forEach(add);
              if (!pg.more) break;
              if (i % 10 === 0) redraw();
            }
            stale = false;
            redraw();
          } while (again);
        } catch (e) {
          if (e.status === 404 || e.name === 'AbortError') return;
          stale = true;
          throw e;
        } finally {
          syncing = null;
        }
      })();
      return syncing;
    }

    return {
      el, add, setJobs, setChildren, redraw, sync,
      tick() {
        if (open) draw();
        if (stale && !syncing) sync().catch(() => { /* said by the next try's failure, or not at all */ });
      },
    };
  }

  // ---- one session ----------------------------------------------------------

  function sessionPage(session) {
    const page = newPage();
    const base = '/v1/sessions/' + enc(session);
    const conn = h('span', { class: 'conn', role: 'status' }, 'connecting…');
    const stateEl = h('span');
    const banner = h('div');
    const history = h('div', { id: 'history' });
    const live = h('div', { id: 'live' });
    const more = h('button', { type: 'button', hidden: true }, 'Load more history');
    const transcript = h('div', { class: 'transcript card', id: 'transcript', role: 'log', 'aria-label': 'Transcript', tabindex: '0' }, history, more, live);
    const hist = renderer(history);
    const liveR = renderer(live, hist);
    const tl = timeline(base, page.signal);
    let next = 0;
    let loading = false;

    const atBottom = () => transcript.scrollHeight - transcript.scrollTop - transcript.clientHeight < 40;
    const keepBottom = (fn) => { const b = atBottom(); fn(); if (b) transcript.scrollTop = transcript.scrollHeight; };

    // loadHistory pages the transcript in from the history API, up to
    // pages pages at a time; "Load more history" fetches the rest.
    async function loadHistory(pages) {
      if (loading) return;
      loading = true;
      try {
        for (let i = 0; i < pages; i++) {
          const pg = await api('GET', `${base}/transcript?after=${next}&limit=200`, undefined, page.signal);
          keepBottom(() => pg.entries.forEach((e) => drawEntry(hist, e)));
          pg.entries.forEach(tl.add);
          next = pg.next;
          more.hidden = !pg.more;
          if (!pg.more) break;
        }
      } catch (e) {
        if (e.status === 404) return; // a new session: no history yet
        throw e;
      } finally {
        loading = false;
        tl.redraw();
      }
    }
    more.addEventListener('click', () => act('Loading history', () => loadHistory(10)));

    // composer
    const msg = h('textarea', { id: 'message', rows: 3, 'aria-describedby': 'message-hint' });
    const agentSel = h('select', { id: 'agent' }, h('option', { value: '' }, "the session's own"));
    api('GET', '/v1/agents', undefined, page.signal).then((l) => agentSel.append(...l.agents.map((a) =>
      h('option', { value: a.name }, a.name)))).catch(() => { /* the composer works without the list */ });
    const send = async (kind) => {
      const text = msg.value;
      if (!text.trim()) { flash('Type something first.'); msg.focus(); return; }
      // The line is shown at once, as the run it starts may answer before
      // the request does; a refusal is said beside it.
      msg.value = '';
      let mine;
      keepBottom(() => { mine = kind === 'steer' ? liveR.notice('you steered: ' + text) : liveR.you(text); });
      const body = kind === 'steer' ? { note: text } : { text };
      if (kind === 'input' && agentSel.value) body.agent = agentSel.value;
      const ok = await act(kind === 'steer' ? 'Steering' : 'Sending', () => api('POST', `${base}/${kind}`, body));
      if (!ok) {
        mine.append(h('span', { class: 'field-error' }, ' — not sent'));
        msg.value = text;
        return;
      }
      if (ok.held && ok.held.length) flash(`Stored, but held by Ground Stop (${ok.held.map((s) => s.scope).join(', ')}): it runs once lifted.`, true);
      refresh();
    };
    msg.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); send('input'); }
    });
    const composer = h('form', { class: 'card composer', 'aria-label': 'Send to the session' },
      h('div', { class: 'field' },
        h('label', { for: 'message' }, 'Message'), msg,
        h('span', { class: 'hint', id: 'message-hint' }, 'Send starts or continues the work (Ctrl+Enter); Steer tells a running agent before its next step.')),
      h('div', { class: 'row' },
        h('button', { class: 'primary', type: 'submit', id: 'send' }, 'Send'),
        h('button', { type: 'button', id: 'steer', onclick: () => send('steer') }, 'Steer'),
        h('span', { class: 'row push' }, h('label', { for: 'agent' }, 'Agent'), agentSel)));
    composer.addEventListener('submit', (e) => { e.preventDefault(); send('input'); });

    // side panels
    const info = h('div', { class: 'card', 'aria-labelledby': 'h-info' });
    const gs = h('div', { class: 'card', id: 'groundstop', 'aria-labelledby': 'h-gs' });
    const jobs = h('div', { class: 'card', id: 'jobs', 'aria-labelledby': 'h-jobs' });
    const lay = h('div', { class: 'card', id: 'layovers', 'aria-labelledby': 'h-lay' });
    const wait = h('div', { id: 'waiting' });
    const rec = h('div', { class: 'card', id: 'recovery', 'aria-labelledby': 'h-rec' });
    const kids = h('div', { id: 'children' });
    const mcp = h('div', { id: 'mcp' });

    fill(main,
      h('h1', {}, 'Session ', session, ' ', stateEl, ' ', conn), banner, tl.el,
      h('div', { class: 'session' },
        h('div', {}, transcript, composer),
        h('div', {}, wait, info, jobs, gs, lay, rec, kids, mcp)));

    // Ground Stop and resume
    const reason = h('input', { id: 'gs-reason', placeholder: 'why (optional)' });
    const note = h('input', { id: 'resume-note', placeholder: 'note (optional)' });

    function drawInfo(d) {
      fill(stateEl, badge(d.state));
      fill(info, h('h2', { id: 'h-info' }, 'Session'),
        h('div', { class: 'small' },
          h('div', {}, 'Agent: ', h('a', { href: '#/agents/' + enc(d.agent) }, d.agent)),
          h('div', {}, `Runs: ${d.runs}`, d.run ? ` · live run ${d.run}` : ''),
          d.cause ? h('div', {}, 'Cause: ', d.cause) : null,
          d.reason ? h('div', {}, 'Reason: ', d.reason) : null,
          h('div', {}, 'In this state since ', at(d.since) || '—'),
          h('div', {}, `Events waiting: ${d.pending_events}`)),
        h('form', { class: 'row', 'aria-label': 'Resume the session', onsubmit: (e) => {
          e.preventDefault();
          act('Resuming', async () => {
            await api('POST', `${base}/resume`, note.value ? { note: note.value } : {});
            note.value = '';
            flash('Resume sent.', true);
            refresh();
          });
        } }, h('label', { for: 'resume-note' }, 'Resume'), note, h('button', { type: 'submit', id: 'resume' }, 'Resume')));
    }

    // liftHint says who lifts the switches holding the session that this
    // page cannot, and how: the console has a control for a session's own
    // switch only (an ancestor's is on that session's page).
    function liftHint(sw) {
      const how = sw.filter((x) => x.scope === 'ancestor').map((x) =>
        h('span', {}, 'the switch of ', h('a', { href: '#/session/' + enc(x.session) }, x.session), ' on its page'));
      const cli = [];
      if (sw.some((x) => x.scope === 'tenant')) {
        cli.push(["the tenant's switch by a tenant admin or an operator with ", h('code', {}, 'jetway stop --off --tenant ' + (signedInTenant || 'TENANT'))]);
      }
      if (sw.some((x) => x.scope === 'global')) cli.push(['the global switch by an operator with ', h('code', {}, 'jetway stop --off --global')]);
      if (cli.length) how.push(h('span', {}, cli.map((x, i) => [i ? '; ' : null, x]), ' (or DELETE /v1/stop on the API)'));
      if (!how.length) return null;
      return h('p', { class: 'small muted', id: 'gs-lift-hint' }, 'Lifted elsewhere: ', how.map((x, i) => [i ? '; ' : null, x]), '.');
    }

    function drawStop(d) {
      const sw = d.ground_stop || [];
      const own = sw.some((s) => s.scope === 'session');
      fill(banner, ...(sw.length ? [h('div', { class: 'banner', role: 'status', id: 'gs-banner' },
        'Ground Stop on (' + sw.map((s) => s.scope + (s.reason ? ': ' + s.reason : '') + (s.by ? ', set by ' + s.by : '')).join('; ') +
        '). Nothing of this session runs until it is lifted.')] : []));
      const form = h('form', { class: 'row', onsubmit: (e) => {
        e.preventDefault();
        act(own ? 'Lifting Ground Stop' : 'Turning Ground Stop on', async () => {
          await api(own ? 'DELETE' : 'POST', '/v1/stop?session=' + enc(session), own ? undefined : { reason: reason.value });
          reason.value = '';
          await refresh();
        });
      } });
      if (own) form.append(h('button', { type: 'submit', id: 'gs-toggle' }, 'Lift Ground Stop'));
      else form.append(h('label', { for: 'gs-reason' }, 'Reason'), reason, h('button', { class: 'danger', type: 'submit', id: 'gs-toggle' }, 'Ground Stop'));
      fill(gs, h('h2', { id: 'h-gs' }, 'Ground Stop'),
        h('p', { class: 'small', id: 'gs-state' }, sw.length ? 'On: ' + sw.map((s) => s.scope).join(', ') : 'Off: the session may run.'),
        liftHint(sw),
        form);
    }

    // jobs: the list comes from the detail and the job table; each running
    // job's tail is read every second while the page is open.
    const tails = new Map();
    function mergeJobs(d, all) {
      const byId = new Map();
      for (const j of all) byId.set(String(j.id), j);
      for (const j of d.jobs || []) byId.set(String(j.id), Object.assign(byId.get(String(j.id)) || {}, j));
      return [...byId.values()].sort((a, b) => Number(b.id) - Number(a.id));
    }
    function drawJobs(js, jobsError) {
      const els = js.map((j) => {
        const running = j.status === 'running';
        const tail = tails.get(String(j.id)) || h('pre', { class: 'tail', id: 'tail-' + j.id, 'aria-label': 'output of job ' + j.id, tabindex: '0' });
        tails.set(String(j.id), tail);
        return h('div', { class: 'job', id: 'job-' + j.id },
          h('div', { class: 'row' }, h('strong', {}, 'job ' + j.id), h('span', { class: 'badge ' + j.status, id: 'job-status-' + j.id }, j.status),
            running ? h('button', { type: 'button', class: 'danger', id: 'kill-' + j.id, onclick: () =>
              act('Killing job ' + j.id, async () => {
                const k = await api('POST', `${base}/jobs/${enc(j.id)}/kill`);
                flash(`job ${j.id} ${k.status}`, true);
                await refresh();
              }) }, 'Kill') : null),
          h('div', { class: 'small muted' }, running ? j.command || j.line || '' : j.line || j.command || ''),
          running ? tail : null);
      });
      fill(jobs, h('h2', { id: 'h-jobs' }, 'Jobs'),
        jobsError ? h('p', { class: 'small field-error' }, 'The jobs worker did not answer: ' + jobsError) : null,
        ...(els.length ? els : [h('p', { class: 'small muted' }, 'No background jobs.')]));
    }

    async function readTails(running) {
      await Promise.all(running.slice(0, 3).map(async (j) => {
        const out = await api('GET', `${base}/jobs/${enc(j.id)}/output?tail=20`, undefined, page.signal);
        const t = tails.get(String(j.id));
        if (t) t.textContent = out.lines.join('\n') + `\n— ${out.total} lines so far`;
      }));
    }

    function drawLayovers(d) {
      const ls = d.layovers || [];
      fill(lay, h('h2', { id: 'h-lay' }, 'Layovers'),
        ...(ls.length ? ls.map((l) => h('div', { class: 'small' },
          h('div', {}, `Waiting for ${l.waiting_for}; resumes ${new Date(l.at).toLocaleString()} (check ${l.checks})`),
          h('button', { type: 'button', id: 'cancel-layover', onclick: () => act('Cancelling the layover', async () => {
            const c = await api('DELETE', `${base}/layover`);
            flash(c.cancelled ? 'Layover cancelled.' : 'There was no layover to cancel.', true);
            await refresh();
          }) }, 'Cancel layover'))) : [h('p', { class: 'small muted' }, 'None: the agent has set no work down to check later.')]));
    }

    // Approvals and questions the session waits for: a card each, decided
    // in place (docs/APPROVALS.md). A decision someone took first shows theirs.
    function drawWaiting(d) {
      const ws = d.waiting || [];
      const decide = (a, body) => act('Deciding ' + a.id, async () => {
        try {
          const r = await api('POST', `/v1/sessions/${enc(a.session)}/approvals/${enc(a.id)}`, body);
          flash(`${a.id} ${r.state}.`, true);
        } catch (e) {
          if (e.status !== 409) throw e;
          flash(`${a.id} was already decided.`, false);
        }
        await refresh();
      });
      fill(wait, ...ws.map((a) => {
        const text = h('input', { id: 'decide-text-' + a.id, placeholder: a.kind === 'question' ? 'your answer' : 'reason (optional)',
          'aria-label': a.kind === 'question' ? 'Your answer to ' + a.id : 'Reason for ' + a.id });
        const buttons = a.kind === 'question'
          ? [h('button', { type: 'submit', class: 'primary', id: 'answer-' + a.id }, 'Answer')]
          : [h('button', { type: 'submit', class: 'primary', id: 'approve-' + a.id }, 'Approve'),
            h('button', { type: 'button', class: 'danger', id: 'reject-' + a.id, onclick: () => decide(a, { decision: 'reject', reason: text.value }) }, 'Reject')];
        return h('div', { class: 'card', id: 'waiting-' + a.id, role: 'region', 'aria-label': 'Waiting for you: ' + a.id },
          h('h2', {}, a.kind === 'question' ? 'The agent asks' : 'Waiting for your approval'),
          h('p', { class: 'small' }, a.kind === 'question'
            ? [a.question, a.choices && a.choices.length ? ' (' + a.choices.join(' | ') + ')' : '']
            : [h('strong', {}, a.tool), ' ', h('code', {}, JSON.stringify(a.input || {}))]),
          h('p', { class: 'small muted' }, `${a.id}${a.session !== session ? ' · sub-agent ' + a.session : ''} · expires ${new Date(a.expires_at).toLocaleString()}`),
          h('form', { class: 'row', onsubmit: (e) => {
            e.preventDefault();
            decide(a, a.kind === 'question' ? { decision: 'answer', answer: text.value } : { decision: 'approve' });
          } }, text, ...buttons));
      }));
    }

    function drawRecovery(d) {
      const r = d.recovery || { effective: {} };
      const o = r.override || {};
      const pol = h('select', { id: 'rec-policy' }, ['', 'automatic', 'manual', 'never'].map((p) =>
        h('option', { value: p, selected: (o.policy || '') === p }, p || 'default')));
      const max = h('input', { id: 'rec-max', type: 'number', min: '0', value: o.max_attempts ?? '', placeholder: 'default' });
      fill(rec, h('h2', { id: 'h-rec' }, 'Recovery'),
        h('p', { class: 'small' }, `In effect: ${r.effective.policy}, at most ${r.effective.max_attempts} restart${r.effective.max_attempts === 1 ? '' : 's'}` + (r.override ? ' (set for this session)' : ' (defaults)')),
        h('form', { class: 'grid2', onsubmit: (e) => {
          e.preventDefault();
          act('Saving the recovery policy', async () => {
            await api('PUT', `${base}/recovery`, { policy: pol.value || null, max_attempts: max.value === '' ? null : Number(max.value) });
            flash('Recovery policy saved.', true);
            await refresh();
          });
        } },
        h('div', { class: 'field' }, h('label', { for: 'rec-policy' }, 'Policy'), pol),
        h('div', { class: 'field' }, h('label', { for: 'rec-max' }, 'Max attempts'), max),
        h('div', { class: 'row wide' }, h('button', { type: 'submit' }, 'Save'),
          h('button', { type: 'button', onclick: () => act('Clearing the recovery policy', async () => {
            await api('DELETE', `${base}/recovery`);
            await refresh();
          }) }, 'Use defaults'))));
    }

    // Children and MCP servers are drawn when the detail has them.
    function drawOptional(d) {
      const ch = d.children || [];
      fill(kids, ...(ch.length ? [h('div', { class: 'card' }, h('h2', {}, 'Sub-agents'),
        h('ul', { class: 'small' }, ch.map((c) => {
          const o = typeof c === 'string' ? { session: c } : c;
          return h('li', {}, h('a', { href: '#/session/' + enc(o.session) }, o.session),
            o.agent ? ' · ' + o.agent : '', o.state ? [' ', badge(o.state)] : '');
        })))] : []));
      const ms = d.mcp || [];
      fill(mcp, ...(ms.length ? [h('div', { class: 'card' }, h('h2', {}, 'MCP servers'),
        h('table', { class: 'small', 'aria-label': 'MCP servers' },
          h('thead', {}, h('tr', {}, h('th', {}, 'Server'), h('th', {}, 'Transport'), h('th', {}, 'State'))),
          h('tbody', {}, ms.map((m) => h('tr', {}, h('td', {}, m.server || m.name || ''), h('td', {}, m.transport || ''),
            h('td', {}, badge(m.state || ''), m.error ? h('div', { class: 'field-error' }, m.error) : null))))))] : []));
    }

    let running = [];
    let pending = null;
    const changed = differ();
    async function refresh() {
      if (pending) return pending;
      pending = (async () => {
        try {
          const [d, table] = await Promise.all([
            api('GET', base, undefined, page.signal).catch((e) => { if (e.status === 404) return null; throw e; }),
            api('GET', `${base}/jobs`, undefined, page.signal).catch(() => ({ jobs: [] })),
          ]);
          if (!d) {
            if (!changed('info', 'new')) return;
            fill(stateEl, badge('new'));
            fill(info, h('h2', { id: 'h-info' }, 'Session'), h('p', { class: 'small muted' }, 'No such session yet: what you send starts it.'));
            if (changed('stop', [])) drawStop({ ground_stop: [] });
            for (const c of [jobs, lay, rec]) c.hidden = true;
            return;
          }
          for (const c of [jobs, lay, rec]) c.hidden = false;
          const all = (table.jobs || []).map((j) => Object.assign({ id: j.job }, typeof j.record === 'object' ? j.record : {}));
          const merged = mergeJobs(d, all);
          tl.setJobs(merged);
          tl.setChildren(d.children);
          const listed = merged.slice(0, 8);
          running = listed.filter((j) => j.status === 'running');
          if (changed('info', [d.state, d.agent, d.runs, d.run, d.cause, d.reason, d.since, d.pending_events])) drawInfo(d);
          if (changed('stop', d.ground_stop)) drawStop(d);
          if (changed('jobs', [d.jobs_error, listed.map((j) => [j.id, j.status, j.command, j.status === 'running' ? '' : j.line])])) drawJobs(listed, d.jobs_error);
          if (changed('layovers', d.layovers)) drawLayovers(d);
          if (changed('waiting', d.waiting)) drawWaiting(d);
          if (changed('recovery', d.recovery)) drawRecovery(d);
          if (changed('optional', [d.children, d.mcp])) drawOptional(d);
        } finally {
          pending = null;
        }
      })();
      return pending;
    }

    page.every(2500, refresh);
    page.every(1000, async () => { if (running.length) await readTails(running); });
    page.every(1000, async () => tl.tick());

    // The timeline reads what the stream says was recorded: once the
    // history is in, and then the entries after its last, a moment after
    // a run starts or ends or a tool call does.
    let historyIn = false;
    let syncSoon = null;
    const syncTimeline = () => {
      if (!historyIn || syncSoon) return;
      syncSoon = setTimeout(() => { syncSoon = null; act('Reading the timeline', tl.sync); }, 250);
    };

    let first = true;
    follow(session, page.signal, (ev) => {
      keepBottom(() => drawEvent(liveR, ev));
      if (/run\.(started|ended)|headline|approval/.test(ev.type)) refresh();
      if (/run\.(started|ended|tool_use|tool_result|delivered)/.test(ev.type)) syncTimeline();
    }, (s, why, fresh) => {
      conn.className = 'conn ' + s;
      conn.textContent = s === 'live' ? '● live' : '○ reconnecting (' + why + ')';
      if (s === 'live' && first) {
        first = false;
        act('Loading history', async () => {
          await loadHistory(10);
          transcript.scrollTop = transcript.scrollHeight;
          historyIn = true;
          await tl.sync();
        });
      } else if (s === 'live' && fresh) {
        // Nothing had come before the drop, so there is no event to resume
        // after: what was recorded meanwhile comes from the history.
        act('Loading history', () => loadHistory(10));
      }
    });
    return page;
  }

  // ---- agents --------------------------------------------------------------

  function agentsPage() {
    const page = newPage();
    const body = h('tbody');
    fill(main, h('h1', {}, 'Agents'),
      h('p', {}, h('a', { href: '#/new-agent', id: 'new-agent' }, 'New agent profile')),
      h('div', { class: 'card table-wrap' }, h('table', { 'aria-label': 'Agent profiles' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Description'), h('th', {}, 'Model'),
          h('th', { class: 'hide-narrow' }, 'Version'), h('th', { class: 'hide-narrow' }, 'Updated'))), body)));
    const changed = differ();
    page.every(10000, async () => {
      const l = await api('GET', '/v1/agents', undefined, page.signal);
      if (!changed('agents', l)) return;
      fill(body, ...l.agents.map((a) => h('tr', {},
        h('td', {}, h('a', { href: '#/agents/' + enc(a.name) }, a.name)),
        h('td', {}, a.description || ''),
        h('td', {}, a.model && a.model.provider ? [a.model.provider, a.model.name].filter(Boolean).join(' ') : 'runner default'),
        h('td', { class: 'hide-narrow' }, a.version),
        h('td', { class: 'hide-narrow' }, at(a.updated)))));
    });
    return page;
  }

  // The agent form's fields, by the names the API's errors use.
  const agentFields = [
    ['description', 'Description', 'text'],
    ['instructions', 'Instructions (the system prompt)', 'textarea'],
    ['model.provider', 'Model provider', ['', 'anthropic', 'openai', 'script']],
    ['model.name', 'Model name', 'text'],
    ['model.endpoint', 'Model endpoint', 'text', 'names runner-side configuration, never a key'],
    ['tools.allow', 'Tools allowed', 'list', 'comma-separated names; empty: every tool'],
    ['tools.deny', 'Tool calls refused', 'list', 'comma-separated rules, e.g. shell(rm *)'],
    ['limits.max_turns', 'Max turns per run', 'number'],
    ['limits.max_duration', 'Max run duration', 'text', 'a duration such as 30m or 2h'],
    ['limits.fuel', 'Fuel (tokens per session)', 'number'],
    ['limits.runs_per_hour', 'Runs per hour', 'number'],
    ['limits.max_subagent_depth', 'Sub-agent depth', 'number', 'how deep sub-agents may nest; empty: 2'],
    ['limits.max_subagents', 'Sub-agents at once', 'number', 'empty: 4'],
    ['recovery', 'Recovery', ['', 'automatic', 'manual', 'never']],
    ['context_window', 'Context window (tokens)', 'number'],
    ['instruction_files', 'Instruction files', 'list', 'comma-separated workspace paths; empty: AGENTS.md'],
    ['mcp', 'MCP servers (JSON)', 'json', 'a JSON list of servers, as in docs/MCP.md; empty: none'],
  ];
  const fieldId = (f) => 'f-' + f.replace(/[.[\]]/g, '-');
  const getPath = (o, p) => p.split('.').reduce((x, k) => (x == null ? undefined : x[k]), o);
  function setPath(o, p, v) {
    const ks = p.split('.');
    let x = o;
    for (const k of ks.slice(0, -1)) x = x[k] = x[k] || {};
    x[ks[ks.length - 1]] = v;
  }
  function deletePath(o, p) {
    const ks = p.split('.');
    const x = getPath(o, ks.slice(0, -1).join('.')) ?? (ks.length === 1 ? o : undefined);
    if (x && typeof x === 'object') delete x[ks[ks.length - 1]];
  }

  function agentPage(name, isNew) {
    const page = newPage();
    const nameInput = h('input', { id: 'f-name', required: true, pattern: '[A-Za-z0-9_-]{1,64}', 'aria-describedby': 'err-f-name' });
    const inputs = new Map();
    const errs = new Map();
    const field = (id, label, control, hint) => {
      const err = h('p', { class: 'field-error', id: 'err-' + id });
      errs.set(id, err);
      control.setAttribute('aria-describedby', (hint ? 'hint-' + id + ' ' : '') + 'err-' + id);
      return h('div', { class: control.tagName === 'TEXTAREA' ? 'field wide' : 'field' }, h('label', { for: id }, label), control,
        hint ? h('span', { class: 'hint', id: 'hint-' + id }, hint) : null, err);
    };
    const fields = agentFields.map(([f, label, kind, hint]) => {
      const id = fieldId(f);
      let c;
      if (Array.isArray(kind)) c = h('select', { id }, kind.map((o) => h('option', { value: o }, o || 'runner default')));
      else if (kind === 'textarea' || kind === 'json') c = h('textarea', { id, rows: 6, spellcheck: 'false' });
      else c = h('input', { id, type: kind === 'number' ? 'number' : 'text' });
      c.dataset.field = f;
      c.dataset.kind = Array.isArray(kind) ? 'select' : kind;
      inputs.set(f, c);
      return field(id, label, c, hint);
    });
    const del = h('button', { type: 'button', class: 'danger', id: 'delete-agent', hidden: isNew }, 'Delete');
    const status = h('p', { class: 'small muted', id: 'agent-version' });
    const form = h('form', { class: 'card', 'aria-label': 'Agent profile', novalidate: true },
      field('f-name', 'Name', nameInput, isNew ? '1–64 of A-Z a-z 0-9 _ -' : null),
      h('div', { class: 'grid2' }, fields),
      h('div', { class: 'row' }, h('button', { class: 'primary', type: 'submit', id: 'save-agent' }, 'Save'), del), status);
    if (!isNew) { nameInput.value = name; nameInput.readOnly = true; }
    fill(main, h('h1', {}, isNew ? 'New agent profile' : 'Agent ' + name),
      h('p', {}, h('a', { href: '#/agents' }, '← all agents')), form);

    // loaded is the profile as last read or saved: a save starts from it,
    // so a field this form does not show is kept, never dropped.
    let loaded = {};
    function fillForm(a) {
      loaded = a;
      for (const [f, c] of inputs) {
        const v = getPath(a, f);
        if (c.dataset.kind === 'json') c.value = v == null ? '' : JSON.stringify(v, null, 2);
        else c.value = Array.isArray(v) ? v.join(', ') : v == null || v === 0 ? '' : v;
      }
      status.textContent = a.version ? `version ${a.version}, updated ${ago(a.updated)}` : 'the implicit default profile: saving stores it';
    }

    function clearErrors() {
      for (const e of errs.values()) e.textContent = '';
      for (const c of form.querySelectorAll('[aria-invalid]')) c.removeAttribute('aria-invalid');
    }

    // showError puts a refusal at the field it names (tools.allow[2] is
    // tools.allow's), or above the form when it names none.
    function showError(e) {
      const f = formField(e.problem.field || '');
      const c = f === 'name' ? nameInput : inputs.get(f);
      if (!c) { flash('Saving failed: ' + e.message); return; }
      c.setAttribute('aria-invalid', 'true');
      errs.get(c.id).textContent = e.message;
      c.focus();
      flash('Saving failed: ' + f + ' — see the field.');
    }

    // formField is the form's field for the one a refusal names:
    // mcp[0].url is the MCP servers', tools.allow[2] is tools.allow's.
    function formField(f) {
      while (f && f !== 'name' && !inputs.has(f)) f = f.replace(/(\.[^.[\]]*|\[\d+\])$/, '');
      return f;
    }

    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      clearErrors();
      const a = structuredClone(loaded);
      for (const k of ['name', 'version', 'updated']) delete a[k];
      for (const [f, c] of inputs) {
        const v = c.value.trim();
        if (v === '') { deletePath(a, f); continue; }
        if (c.dataset.kind === 'number') setPath(a, f, Number(v));
        else if (c.dataset.kind === 'list') setPath(a, f, list(v));
        else if (c.dataset.kind === 'json') {
          try { setPath(a, f, JSON.parse(v)); } catch (err) {
            showError({ problem: { field: f }, message: f + ': not JSON: ' + err.message });
            return;
          }
        } else setPath(a, f, v);
      }
      if (!a.instructions) a.instructions = '';
      const n = nameInput.value.trim();
      try {
        const saved = await api('PUT', '/v1/agents/' + enc(n), a);
        flash(`Saved ${saved.name}, version ${saved.version}.`, true);
        if (isNew) location.hash = '#/agents/' + enc(saved.name);
        else fillForm(saved);
      } catch (e) {
        if (e.name !== 'AbortError') showError(e);
      }
    });
    let armed = false;
    del.addEventListener('click', () => {
      if (!armed) { armed = true; del.textContent = 'Really delete ' + name + '?'; return; }
      act('Deleting ' + name, async () => {
        await api('DELETE', '/v1/agents/' + enc(name));
        location.hash = '#/agents';
      });
    });
    if (!isNew) act('Reading agent ' + name, async () => fillForm(await api('GET', '/v1/agents/' + enc(name), undefined, page.signal)));
    else nameInput.focus();
    return page;
  }

  // ---- cluster (operators) --------------------------------------------------

  function clusterPage() {
    const page = newPage();
    const body = h('div');
    fill(main, h('h1', {}, 'Cluster'), body);
    const table = (label, heads, rows) => h('div', { class: 'card table-wrap' }, h('h2', {}, label),
      h('table', { 'aria-label': label }, h('thead', {}, h('tr', {}, heads.map((x) => h('th', {}, x)))),
        h('tbody', {}, rows.length ? rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c)))) :
          h('tr', {}, h('td', { colspan: heads.length, class: 'muted' }, 'none')))));
    page.every(3000, async () => {
      let c;
      try {
        c = await api('GET', '/v1/cluster', undefined, page.signal);
      } catch (e) {
        if (e.status === 403) { fill(body, h('p', { class: 'card' }, 'The cluster view needs an operator token: ' + e.message)); return; }
        throw e;
      }
      const holder = new Map();
      for (const r of c.runners) for (const p of r.partitions || []) holder.set(p, r.id);
      fill(body, 
        table('Runners', ['Runner', 'Partitions held', 'Last heartbeat'], c.runners.map((r) => [
          r.id, (r.partitions || []).join(', ') || 'none yet (a partition is taken with its first event)',
          [ago(r.heartbeat), r.stale ? [' ', badge('stale')] : '']])),
        table('Partitions', ['Partition', 'Held by', 'Waiting', 'Unacknowledged', 'Redelivered'], c.partitions.map((p) => [
          p.partition, holder.get(p.partition) || h('span', { class: 'badge stop' }, 'nobody'), p.pending, p.ack_pending, p.redelivered])),
        table('Jobs workers', ['Worker', 'Version', 'Confinement', 'Sessions bound'], c.jobs_workers.map((w) => [
          w.id, w.version || '', w.confinement || '', w.sessions])),
        table('Streams', ['Stream', 'Messages', 'Bytes', 'Consumers'], c.streams.map((s) => [s.name, s.messages, s.bytes, s.consumers])),
        table('Consumers', ['Stream', 'Consumer', 'Waiting (lag)', 'Unacknowledged', 'Redelivered'], c.consumers.map((k) => [
          k.stream, k.name, k.pending, k.ack_pending, k.redelivered])));
    });
    return page;
  }

  // ---- start ----------------------------------------------------------------

  document.getElementById('signout').addEventListener('click', () => signOut('Signed out.'));
  window.addEventListener('hashchange', route);
  route();
})();
