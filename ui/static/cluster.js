// The cluster page: GET /v1/status (this node) and GET /v1/members (the
// raft configuration, with the leader marked), as `cairn members` shows.
'use strict';

(() => {
  const { $, get, el, follow } = cairn;

  function renderStatus(st) {
    $('st-node').textContent = st.node_id;
    $('st-state').textContent = st.state;
    $('st-leader').textContent = st.leader_id || 'unknown';
    $('st-revision').textContent = String(st.revision);
    $('st-caught-up').textContent = st.caught_up ? 'yes' : 'no';
    $('no-leader').hidden = Boolean(st.leader_id);
    $('behind').hidden = st.caught_up;
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

  follow(async () => {
    const st = await get('status');
    renderStatus(st);
    renderMembers(await get('members'), st.node_id);
  });
})();
