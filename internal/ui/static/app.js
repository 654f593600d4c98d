// Shared by every page: calls to the JSON API with the session's token,
// the token prompt, and following the node's revision.
'use strict';

const cairn = (() => {
  const tokenKey = 'cairn.token';
  const $ = (id) => document.getElementById(id);

  // AuthError is a 401 or 403 from the API: the page asks for a token.
  class AuthError extends Error {}

  function token() {
    return sessionStorage.getItem(tokenKey) || '';
  }

  // get fetches an API path (relative to /v1/) with the session's token
  // as a bearer token, never in the URL, and returns the decoded JSON.
  async function get(path) {
    const headers = { Accept: 'application/json' };
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    const resp = await fetch('../v1/' + path, { headers, cache: 'no-store', credentials: 'omit' });
    let body = null;
    try {
      body = await resp.json();
    } catch (e) {
      body = null;
    }
    const msg = (body && body.error) || (resp.status + ' ' + resp.statusText);
    if (resp.status === 401 || resp.status === 403) throw new AuthError(msg);
    if (!resp.ok) throw new Error(msg);
    return body;
  }

  // el builds an element; children are nodes or strings (text, never HTML).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(typeof c === 'string' ? document.createTextNode(c) : c);
    }
    return e;
  }

  function showError(msg) {
    const b = $('error');
    b.textContent = msg;
    b.hidden = !msg;
  }

  // flagList renders status-table flags; health_disregarded is loud.
  function flagList(flags) {
    const span = el('span', { class: 'flags' });
    for (const f of flags || []) {
      if (f === 'eligible') continue; // its own column says it
      span.append(el('span', { class: 'flag' + (f === 'health_disregarded' ? ' loud' : ''), text: f }));
    }
    return span;
  }

  // follow calls load once, then again whenever the node's revision
  // (GET /v1/status, which needs no token) changes, and once more when
  // its table has caught up with it: one small request a second per
  // open page, and a reload only when something was written.
  // While the page is hidden it does not poll. watch, if given, is told
  // each poll's outcome: watch(status) after GET /v1/status and the load
  // it may start succeed, watch(null, error) when either fails; it is for
  // what changes without a write (ages, last contact, subscribers).
  //
  // With opts.table, the page also reloads when the status table's
  // version moves (every evaluation round, about once a second): the
  // service page shows the weights the table serves, which rise through
  // slow start without a write.
  function follow(load, watch, opts) {
    const byTable = !!(opts && opts.table);
    let seen = null;
    let needToken = false;
    const form = $('token-form');
    const forget = $('forget-token');
    forget.hidden = !token();

    function askToken(msg) {
      needToken = true;
      $('token-message').textContent = token()
        ? 'The API refused this token: ' + msg
        : 'The API needs a token: ' + msg;
      form.hidden = false;
    }
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const input = $('token-input');
      sessionStorage.setItem(tokenKey, input.value.trim());
      input.value = '';
      form.hidden = true;
      forget.hidden = false;
      needToken = false;
      seen = null;
      tick();
    });
    forget.addEventListener('click', () => {
      sessionStorage.removeItem(tokenKey);
      forget.hidden = true;
      seen = null;
      tick();
    });

    let timer = null;
    let running = false;
    async function refresh() {
      const st = await get('status');
      $('node-status').textContent = 'node ' + st.node_id + ' (' + st.state + '), leader ' +
        (st.leader_id || 'unknown') + ', revision ' + st.revision;
      // Every page reloads when the table catches up with a write
      // (table_revision): what a page shows of the table (eligible,
      // health disregarded) is published a round after the commit.
      const mark = st.revision + '/' + (byTable ? st.table_version : st.table_revision);
      if (needToken || mark === seen) return st;
      try {
        await load();
        seen = mark;
      } catch (e) {
        if (e instanceof AuthError) askToken(e.message);
        else throw e;
      }
      return st;
    }
    async function tick() {
      clearTimeout(timer);
      if (running) return;
      running = true;
      try {
        if (!document.hidden) {
          const st = await refresh();
          showError('');
          if (watch) watch(st, null);
        }
      } catch (e) {
        showError('Cannot reach the API: ' + e.message);
        seen = null;
        if (watch) watch(null, e);
      } finally {
        running = false;
        timer = setTimeout(tick, 1000);
      }
    }
    document.addEventListener('visibilitychange', () => {
      if (!document.hidden) tick();
    });
    tick();
  }

  // duration says seconds as "3.4 s", "12 s", "3 min 4 s", "2 h 5 min"
  // or "12 d 3 h".
  function duration(seconds) {
    if (seconds < 10) return Math.max(0, seconds).toFixed(1) + ' s';
    const s = Math.round(seconds);
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
    if (s < 172800) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
    return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
  }

  // staleness says why what a page shows may be stale, '' when nothing
  // says so: the last poll failed (failure), or GET /v1/status (st) says
  // the node has not caught up with a leader since it started, or that
  // its view is stale (older than its --stale-after: what its DNS answers
  // mark stale). revision is the one the page shows. Pages call it on
  // every poll, as a node cut off from its leader stops changing its
  // revision and so never triggers a reload.
  function staleness(st, failure, revision) {
    if (failure) {
      return 'STALE: the last poll of the node failed (' + failure + '); what is shown is from revision ' +
        (revision === null || revision === undefined ? 'unknown' : revision) + '.';
    }
    if (!st) return '';
    if (!st.caught_up) {
      return 'STALE: node ' + st.node_id + ' is not caught up with the leader (caught_up false); ' +
        'its revision ' + st.revision + ' may be behind the cluster\'s.';
    }
    if (st.stale) {
      return 'STALE: node ' + st.node_id + '\'s view is ' + duration(st.age_seconds) + ' old' +
        (st.leader_id ? '' : ' and it knows no leader') + '; its DNS answers say so (EDE 3; SERVFAIL past --max-stale), and revision ' +
        st.revision + ' may be behind the cluster\'s.';
    }
    return '';
  }

  return { $, get, el, flagList, follow, duration, staleness };
})();
