// The service page: GET /v1/services/{ns}/{svc}, whose view is what
// GET .../endpoints and `cairn endpoints` show: what this node's status
// table serves (verdict, eligibility, weight, tier), reloaded at every
// table, with the evaluator's committed verdict beside it.
'use strict';

(() => {
  const { $, get, el, flagList, follow, duration, staleness } = cairn;
  const q = new URLSearchParams(location.search);
  const ns = q.get('ns') || '';
  const svc = q.get('svc') || '';
  document.title = 'cairn · ' + ns + '/' + svc;
  $('title').textContent = ns + '/' + svc;
  $('events-link').href = 'events.html?' + new URLSearchParams({ ns, svc });

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

  // age is how long ago an instant was, as "4s", "3m" or "2h"; the
  // cells holding one keep the instant (data-at) and are redrawn every
  // second, without a request.
  function age(at) {
    const s = Math.max(0, Math.round((Date.now() - Date.parse(at)) / 1000));
    if (s < 120) return s + 's';
    if (s < 7200) return Math.floor(s / 60) + 'm';
    return Math.floor(s / 3600) + 'h';
  }
  setInterval(() => {
    for (const a of document.querySelectorAll('.age[data-at]')) a.textContent = age(a.dataset.at);
  }, 1000);

  // evidence shows the endpoint's latest evidence per class and observer
  // as the API lists it (freshest first within each class), compactly:
  // "probe ✓ n1 2s, ✓ n2 1s; outcome ✗ xds:foo 5s". A probe's status or
  // error and an outcome window's counts are each item's title. Only the
  // leader holds evidence: a follower's answer has none.
  function evidence(e) {
    const list = e.evidence || [];
    if (list.length === 0) return el('span', { class: 'muted', text: '-' });
    const byClass = new Map();
    for (const c of list) {
      if (!byClass.has(c.class)) byClass.set(c.class, []);
      byClass.get(c.class).push(c);
    }
    const out = el('span', { class: 'evidence-list' });
    let first = true;
    for (const [cls, items] of byClass) {
      if (!first) out.append('; ');
      first = false;
      const group = el('span', { class: 'ev-group', 'data-class': cls }, el('span', { class: 'ev-class', text: cls }), ' ');
      items.forEach((c, i) => {
        if (i > 0) group.append(', ');
        group.append(el('span', { class: 'ev ' + (c.ok ? 'ok' : 'bad'), 'data-observer': c.observer, title: (c.detail ? c.detail + ' · ' : '') + c.at },
          el('span', { class: 'mark', text: c.ok ? '✓' : '✗' }), ' ' + c.observer + ' ',
          el('span', { class: 'age', 'data-at': c.at, text: age(c.at) })));
      });
      out.append(group);
    }
    return out;
  }

  // tier is the endpoint's priority for a caller at this node's place,
  // as DNS and xDS serve it: 0 same zone, 1 same region, 2 elsewhere.
  function tier(e) {
    if (e.tier === undefined || e.tier === null) return el('td', { class: 'tier muted', text: '-' });
    return el('td', { class: 'num tier', title: ['this zone', 'this region', 'another region'][e.tier] || '', text: String(e.tier) });
  }

  // evaluator is the evaluator's committed verdict, beside what the
  // table serves; its reasons are the cell's title.
  function evaluator(e) {
    const v = e.evaluator;
    if (!v) return el('td', { class: 'evaluator muted', text: '-' });
    return el('td', { class: 'evaluator v-' + v.verdict, title: (v.reasons || []).join('; '),
      text: v.verdict + (v.eligible ? ', eligible' : ', withdrawn') });
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
      tier(e),
      evaluator(e),
      el('td', { class: 'lease', title: e.lease_deadline, text: lease(e) }),
      el('td', { class: 'flags-cell' }, flagList(e.flags)),
      el('td', { class: 'reasons', text: (e.reasons || []).join('; ') || '-' }),
      el('td', { class: 'evidence' }, evidence(e)),
      el('td', { class: 'events' }, el('a', { href: 'events.html?' + new URLSearchParams({ ns, svc, instance: e.instance_id }), text: 'events' }))));
    $('endpoints').tBodies[0].replaceChildren(...rows);
    $('empty').hidden = rows.length > 0;
    $('disregarded').hidden = !v.health_disregarded;
    shown = v.revision;
    showStale(v.stale ? 'STALE: this node\'s view is ' + duration(v.age_seconds) + ' old; its DNS answers say so (EDE 3; SERVFAIL past --max-stale).' : '');
    const elig = v.endpoints.filter((e) => e.eligible).length;
    $('summary').textContent = v.endpoints.length + ' instances, ' + elig + ' eligible; view revision ' + v.revision +
      ', definition revision ' + d.definition.revision + '; served from status table ' + v.table_version +
      ' (store revision ' + v.table_revision + '), tiers from this node\'s place; updated ' + new Date().toLocaleTimeString();
  }

  if (!ns || !svc) {
    $('error').textContent = 'No service named: open this page from the services list.';
    $('error').hidden = false;
    return;
  }
  // The banner follows every poll of the node's status, not only the
  // view's loads: a node cut off from its leader no longer changes its
  // revision, so the view would never be fetched again to say so.
  let shown = null; // the revision of the view shown
  function showStale(why) {
    $('stale').hidden = !why;
    $('stale').textContent = why;
    document.body.classList.toggle('stale', !!why);
  }
  follow(async () => {
    render(await get('services/' + encodeURIComponent(ns) + '/' + encodeURIComponent(svc)));
  }, (st, err) => showStale(staleness(st, err ? err.message || String(err) : null, shown)), { table: true });
})();
