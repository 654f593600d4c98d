// The service page: GET /v1/services/{ns}/{svc}, whose view is what
// GET .../endpoints and `cairn endpoints` show.
'use strict';

(() => {
  const { $, get, el, flagList, follow } = cairn;
  const q = new URLSearchParams(location.search);
  const ns = q.get('ns') || '';
  const svc = q.get('svc') || '';
  document.title = 'cairn · ' + ns + '/' + svc;
  $('title').textContent = ns + '/' + svc;

  // lease is what `cairn endpoints` shows: the time to the deadline of
  // the last renewal, or "expired".
  function lease(e) {
    if (e.lease_expired) return 'expired';
    const s = Math.round((Date.parse(e.lease_deadline) - Date.now()) / 1000);
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm' + (s % 60) + 's';
    return Math.floor(s / 3600) + 'h' + Math.floor((s % 3600) / 60) + 'm';
  }

  function addresses(e) {
    const ports = Object.entries(e.ports || {}).map(([k, v]) => k + ':' + v).join(' ');
    return (e.addresses || []).join(', ') + (ports ? ' (' + ports + ')' : '');
  }

  function weight(e) {
    const m = el('meter', { min: '0', max: String(Math.max(e.base_weight, 1)), value: String(e.weight) });
    return el('span', { class: 'weight' }, m, el('span', { class: 'w', text: e.weight + ' / ' + e.base_weight }));
  }

  function render(d) {
    const v = d.view;
    const rows = v.endpoints.map((e) => el('tr', { 'data-instance': e.instance_id, class: 'lc-' + e.lifecycle },
      el('td', { class: 'instance', text: e.instance_id }),
      el('td', { class: 'num incarnation', text: String(e.incarnation) }),
      el('td', { class: 'addresses', text: addresses(e) }),
      el('td', { class: 'zone', text: e.zone || '-' }),
      el('td', { class: 'lifecycle', text: e.lifecycle }),
      el('td', { class: 'verdict v-' + e.verdict, text: e.verdict }),
      el('td', { class: 'eligible ' + (e.eligible ? 'yes' : 'no'), text: e.eligible ? 'yes' : 'no' }),
      el('td', { class: 'weight-cell' }, weight(e)),
      el('td', { class: 'lease', title: e.lease_deadline, text: lease(e) }),
      el('td', { class: 'flags-cell' }, flagList(e.flags)),
      el('td', { class: 'reasons', text: (e.reasons || []).join('; ') || '-' })));
    $('endpoints').tBodies[0].replaceChildren(...rows);
    $('empty').hidden = rows.length > 0;
    $('disregarded').hidden = !v.health_disregarded;
    $('stale').hidden = !v.stale;
    const elig = v.endpoints.filter((e) => e.eligible).length;
    $('summary').textContent = v.endpoints.length + ' instances, ' + elig + ' eligible; view revision ' + v.revision +
      ', definition revision ' + d.definition.revision + '; updated ' + new Date().toLocaleTimeString();
  }

  if (!ns || !svc) {
    $('error').textContent = 'No service named: open this page from the services list.';
    $('error').hidden = false;
    return;
  }
  follow(async () => {
    render(await get('services/' + encodeURIComponent(ns) + '/' + encodeURIComponent(svc)));
  });
})();
