// The cluster page: GET /v1/status (this node, its last contact with the
// leader and its xDS subscribers) and GET /v1/members (the raft
// configuration, with the leader marked), as `cairn members` shows, and
// GET /v1/evacuations, as `cairn evacuations` shows.
'use strict';

(() => {
  const { $, get, el, follow, duration } = cairn;

  // since is how long ago an instant was, by this browser's clock, as
  // "120 ms ago", "4.2 s ago" or "3 min ago".
  function since(at) {
    const ms = Math.max(0, Date.now() - Date.parse(at));
    if (ms < 1000) return Math.round(ms) + ' ms ago';
    if (ms < 60000) return (ms / 1000).toFixed(1) + ' s ago';
    if (ms < 7200000) return Math.floor(ms / 60000) + ' min ago';
    return Math.floor(ms / 3600000) + ' h ago';
  }

  // renderStatus runs on every status read (once a second), as the last
  // contact and the subscribers change without a write.
  function renderStatus(st) {
    $('st-node').textContent = st.node_id;
    $('st-state').textContent = st.state;
    $('st-leader').textContent = st.leader_id || 'unknown';
    $('st-revision').textContent = String(st.revision);
    $('st-caught-up').textContent = st.caught_up ? 'yes' : 'no';
    const lc = $('st-last-contact');
    lc.textContent = st.last_contact
      ? since(st.last_contact) + (st.state === 'Leader' ? ' (this node is the leader)' : '')
      : 'never';
    lc.title = st.last_contact || '';
    const fr = $('st-freshness');
    fr.textContent = (st.stale ? 'STALE' : 'fresh') + ': its view is ' + duration(st.age_seconds) + ' old' +
      (st.stale ? '; its DNS answers say so (EDE 3; SERVFAIL past --max-stale)' : '');
    fr.className = st.stale ? 'loud' : '';
    renderTLS(st.tls);
    $('no-leader').hidden = Boolean(st.leader_id);
    $('behind').hidden = st.caught_up;
    renderXDS(st.xds);
  }

  // renderTLS shows the node's certificates as GET /v1/status tells them:
  // a rotation due and a reload failing are loud, as they otherwise show
  // only in logs and metrics.
  function renderTLS(x) {
    const td = $('st-tls');
    if (!x) {
      td.textContent = 'plaintext';
      td.className = '';
      return;
    }
    const left = (Date.parse(x.cert_not_after) - Date.now()) / 1000;
    const parts = [left > 0
      ? 'certificate expires in ' + duration(left) + ' (' + x.cert_not_after + ')'
      : 'certificate EXPIRED at ' + x.cert_not_after];
    parts.push('CA expires ' + x.ca_not_after);
    if (x.rotate_soon) parts.push('ROTATE: past two thirds of its lifetime');
    if (x.reload_failing) parts.push('RELOAD FAILING: the files on disk cannot be loaded; the previous ones are in use');
    td.textContent = parts.join('; ');
    td.className = x.rotate_soon || x.reload_failing || left <= 0 ? 'loud' : '';
  }

  function renderXDS(x) {
    const rows = x ? x.revisions.map((r) => el('tr', { 'data-revision': String(r.revision), class: r.behind ? 'behind' : '' },
      el('td', { class: 'revision', text: r.revision ? String(r.revision) : '0 (none acknowledged)' }),
      el('td', { class: 'subscribers', text: String(r.subscribers) }),
      el('td', { class: 'behind', text: String(r.behind) }))) : [];
    $('xds-revisions').tBodies[0].replaceChildren(...rows);
    $('xds-revisions').hidden = rows.length === 0;
    $('xds-summary').textContent = !x ? 'This node runs no xDS server.'
      : x.subscribers + ' subscriber' + (x.subscribers === 1 ? '' : 's') + ', ' + x.behind + ' behind, on ' +
        x.streams + ' stream' + (x.streams === 1 ? '' : 's');
  }

  function renderMembers(ms, self) {
    const rows = ms.map((m) => el('tr', { 'data-node': m.node_id, class: m.leader ? 'leader' : '' },
      el('td', { class: 'node' }, m.node_id, m.node_id === self ? el('span', { class: 'muted', text: ' (this node)' }) : null),
      el('td', { class: 'role', text: m.leader ? 'leader' : 'follower' }),
      el('td', { class: 'voter', text: m.voter ? 'yes' : 'no' }),
      el('td', { class: 'http-addr', text: m.http_addr || '-' }),
      el('td', { class: 'raft-addr', text: m.raft_addr || '-' }),
      el('td', { class: 'where', text: [m.region, m.zone].filter(Boolean).join(' / ') || '-' })));
    $('members').tBodies[0].replaceChildren(...rows);
    $('empty').hidden = rows.length > 0;
    const leader = ms.find((m) => m.leader);
    $('summary').textContent = ms.length + ' member' + (ms.length === 1 ? '' : 's') + ', ' +
      ms.filter((m) => m.voter).length + ' voting; leader ' + (leader ? leader.node_id : 'unknown') +
      '; updated ' + new Date().toLocaleTimeString();
  }

  // evacState is an evacuation's state with what a reader needs beside
  // it, as `cairn evacuations` says it: "evacuated, forced", "returning
  // for 1m10s (ended by expiry)", "paused: …".
  function evacState(e) {
    let s = e.state;
    if (e.state === 'returning') s += ' for ' + (e.returned || '0s') + ' (ended by ' + (e.ended_by || '?') + ')';
    if (e.state === 'paused') s += ': ' + (e.pause_reason || 'no reason given');
    return s + (e.forced ? ', forced' : '');
  }

  function renderEvacuations(es) {
    const rows = es.map((e) => el('tr', { 'data-evacuation': String(e.id), 'data-state': e.state, class: 'evac-' + e.state },
      el('td', { class: 'num id', text: String(e.id) }),
      el('td', { class: 'region', text: e.region || 'every region' }),
      el('td', { class: 'zone', text: e.zone }),
      el('td', { class: 'service', text: e.service ? e.namespace + '/' + e.service : 'every service' }),
      el('td', { class: 'state', text: evacState(e) }),
      el('td', { class: 'actor', text: e.actor || '-' }),
      el('td', { class: 'started', title: e.started_at, text: new Date(e.started_at).toLocaleString() }),
      el('td', { class: 'expires', title: e.expires_at, text: e.state === 'evacuated' ? new Date(e.expires_at).toLocaleString() : '-' }),
      el('td', { class: 'reason', text: [e.reason, e.note].filter(Boolean).join('; ') || '-' })));
    $('cluster-evacuations').tBodies[0].replaceChildren(...rows);
    $('cluster-evacuations').hidden = rows.length === 0;
    const n = (state) => es.filter((e) => e.state === state).length;
    $('evacuations-summary').textContent = es.length === 0 ? 'No zone is evacuated or returning.'
      : n('evacuated') + ' evacuated, ' + n('returning') + ' returning, ' + n('paused') + ' paused';
  }

  follow(async () => {
    const st = await get('status');
    renderMembers(await get('members'), st.node_id);
    renderEvacuations(await get('evacuations'));
  }, (st) => {
    if (st) renderStatus(st);
  });
})();
