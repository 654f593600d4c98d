// The service page: GET /v1/services/{ns}/{svc}, whose view is what
// GET .../endpoints and `cairn endpoints` show: what this node's status
// table serves (verdict, eligibility, weight, tier), reloaded at every
// table, with the evaluator's committed verdict beside it, and the
// evacuations over the service's zones: an evacuated zone and one coming
// back, with the share of its traffic taken back, beside each endpoint's
// zone and in a section of their own; and the newest rollout (GET
// .../rollout, as `cairn rollout status` shows it).
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

  const percent = (x) => Math.round(x * 100) + '%';

  // weight is the table's weight of the endpoint; while its zone returns
  // from an evacuation, DNS and xDS serve it scaled by the zone's share
  // ("100 / 100 × 30%"), and the meter shows the scaled weight.
  function weight(e) {
    const scaled = e.evacuation === 'returning' && e.share !== undefined && e.share !== null;
    const m = el('meter', { min: '0', max: String(Math.max(e.base_weight, 1)), value: String(scaled ? e.weight * e.share : e.weight) });
    const w = el('span', { class: 'weight' }, m, el('span', { class: 'w', text: e.weight + ' / ' + e.base_weight }));
    if (scaled) {
      w.append(el('span', { class: 'w-share', title: 'served scaled by the share its zone has taken back from an evacuation', text: ' × ' + percent(e.share) }));
    }
    return w;
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
  // as DNS and xDS serve it: 0 same zone, 1 same region, 2 elsewhere,
  // 3 an evacuated zone (last for every caller).
  function tier(e) {
    if (e.tier === undefined || e.tier === null) return el('td', { class: 'tier muted', text: '-' });
    return el('td', { class: 'num tier', title: ['this zone', 'this region', 'another region', 'an evacuated zone: last for every caller'][e.tier] || '',
      text: String(e.tier) });
  }

  // zone is the endpoint's zone and what an evacuation does to it, as
  // `cairn endpoints` says it: "a (evacuated)", "a (returning, 30%)",
  // the share being the fraction of its traffic the zone has taken back.
  function zone(e) {
    const td = el('td', { class: 'zone' }, e.zone || '-');
    if (!e.evacuation) return td;
    const share = e.share ?? (e.evacuation === 'evacuated' ? 0 : 1);
    const text = e.evacuation === 'evacuated' ? 'evacuated' : e.evacuation + ', ' + percent(share);
    const title = e.evacuation === 'evacuated'
      ? 'an evacuation of this zone puts the instance last for every caller; it stays registered, probed and eligible'
      : 'the zone is coming back from an evacuation: it has taken back ' + percent(share) + ' of its traffic';
    td.append(' (', el('span', { class: 'evac ' + e.evacuation, 'data-evacuation': e.evacuation, 'data-share': String(share), title, text }), ')');
    return td;
  }

  // scope names an evacuation's scope as `cairn evacuations` does:
  // "zone a in region r1, every service", "zone a of shop/web".
  function scope(ev) {
    return 'zone ' + ev.zone + (ev.region ? ' in region ' + ev.region : '') +
      (ev.service ? ' of ' + ev.namespace + '/' + ev.service : ', every service');
  }

  // covered is the endpoints of the view in ev's scope (the view is of
  // one service: those in its zone and region).
  function covered(ev, endpoints) {
    return endpoints.filter((e) => e.lifecycle !== 'terminated' && e.zone === ev.zone && (!ev.region || e.region === ev.region));
  }

  // shareOf is the share of the traffic ev's zone has taken back, as the
  // table serves it; null when no endpoint says.
  function shareOf(ev, endpoints) {
    const shares = covered(ev, endpoints).filter((e) => e.evacuation && e.share !== undefined && e.share !== null).map((e) => e.share);
    return shares.length ? Math.min(...shares) : null;
  }

  // evacState says where an evacuation is for this service, with the
  // share of the traffic its zone has taken back as the table serves it:
  // "evacuated", "returning, 30% back", "paused at 30%: …".
  function evacState(ev, endpoints) {
    const share = shareOf(ev, endpoints);
    const back = share === null ? '' : ' ' + percent(share);
    let s = ev.state;
    if (ev.state === 'returning') {
      s += back ? ',' + back + ' back' : '';
    } else if (ev.state === 'paused') {
      s += (back ? ' at' + back : '') + ': ' + (ev.pause_reason || 'no reason given');
    }
    return s + (ev.forced ? ', forced' : '');
  }

  // ends says when an evacuation ends, or when it ended.
  function ends(ev) {
    if (ev.state === 'evacuated') {
      const left = (Date.parse(ev.expires_at) - Date.now()) / 1000;
      return el('td', { class: 'ends', title: ev.expires_at, text: left > 0 ? 'expires in ' + duration(left) : 'expiring' });
    }
    return el('td', { class: 'ends', title: ev.ended_at || '' }, 'ended ', el('span', { class: 'age', 'data-at': ev.ended_at, text: age(ev.ended_at) }),
      ' ago' + (ev.ended_by ? ' by ' + ev.ended_by : ''));
  }

  // evacSummary is one sentence per evacuation, for the banner.
  function evacSummary(ev, endpoints) {
    const n = covered(ev, endpoints).length;
    const where = 'Zone ' + ev.zone + (ev.region ? ' (region ' + ev.region + ')' : '');
    const its = n + ' instance' + (n === 1 ? '' : 's');
    switch (ev.state) {
      case 'evacuated':
        return 'EVACUATED: ' + where + ': its ' + its + ' go last for every caller, and stay registered, probed and eligible.';
      case 'paused':
        return 'RETURN PAUSED: ' + where + ' stopped coming back: ' + (ev.pause_reason || 'no reason given') + '.';
    }
    const share = shareOf(ev, endpoints);
    return 'RETURNING: ' + where + ' is coming back from an evacuation in steps over the service\'s shift_back' +
      (share === null ? '.' : ': ' + percent(share) + ' of its traffic is back.');
  }

  function renderEvacuations(v) {
    const evs = v.evacuations || [];
    $('evacuations').hidden = evs.length === 0;
    $('evacuations-summary').textContent = evs.map((ev) => evacSummary(ev, v.endpoints)).join(' ');
    $('evacuations-list').tBodies[0].replaceChildren(...evs.map((ev) => el('tr', { 'data-evacuation': String(ev.id), 'data-state': ev.state, class: 'evac-' + ev.state },
      el('td', { class: 'scope', text: scope(ev) }),
      el('td', { class: 'state', text: evacState(ev, v.endpoints) }),
      el('td', { class: 'actor', text: ev.actor || '-' }),
      el('td', { class: 'started', title: ev.started_at }, el('span', { class: 'age', 'data-at': ev.started_at, text: age(ev.started_at) }), ' ago'),
      ends(ev),
      el('td', { class: 'reason', text: [ev.reason, ev.note].filter(Boolean).join('; ') || '-' }))));
  }

  // evaluator is the evaluator's committed verdict, beside what the
  // table serves; its reasons are the cell's title.
  function evaluator(e) {
    const v = e.evaluator;
    if (!v) return el('td', { class: 'evaluator muted', text: '-' });
    return el('td', { class: 'evaluator v-' + v.verdict, title: (v.reasons || []).join('; '),
      text: v.verdict + (v.eligible ? ', eligible' : ', withdrawn') });
  }

  // instance is the instance's cell: its id and, while the newest
  // rollout is in progress, whether it is of the latest set and its
  // deploy ramp.
  function instance(e, ro) {
    const td = el('td', { class: 'instance' }, e.instance_id);
    const ri = ro && !ro.summary.complete &&
      ro.instances.find((i) => i.instance_id === e.instance_id && i.incarnation === e.incarnation);
    if (ri && ri.latest) {
      td.append(' ', el('span', { class: 'flag rollout-latest', title: 'of the latest set: registered since the newest rollout began; ' +
        ri.phase.replace('_', ' ') + ', slow start over ' + ri.slow_start, text: 'latest' }));
      if (ri.ramp) td.append(' ', el('span', { class: 'flag rollout-ramp', title: 'its deploy ramp: a slow start of ' + ri.ramp, text: 'ramp ' + ri.ramp }));
    }
    return td;
  }

  // renderRollout says how far the newest rollout has come, as `cairn
  // rollout status` does.
  function renderRollout(ro) {
    const p = $('rollout');
    const s = ro.summary;
    p.hidden = s.latest === 0;
    if (p.hidden) return;
    p.classList.toggle('in-progress', !s.complete);
    p.dataset.started = ro.started_at;
    p.title = 'the latest set: the instances registered since the newest rollout began (' + ro.started_at + ')';
    p.textContent = 'Rollout since ' + new Date(ro.started_at).toLocaleTimeString() + ': ' + s.latest + ' of ' + s.instances +
      ' instance' + (s.instances === 1 ? '' : 's') + '; ' + s.in_rotation + ' in rotation (' + s.full_weight + ' at full weight, ' +
      s.ramping + ' ramping), ' + s.not_eligible + ' not eligible; ' + (s.complete ? 'complete.' : 'in progress.');
  }

  function render(d, ro) {
    const v = d.view;
    const rows = v.endpoints.map((e) => el('tr', { 'data-instance': e.instance_id, class: 'lc-' + e.lifecycle + (e.evacuation ? ' evac-' + e.evacuation : '') },
      instance(e, ro),
      el('td', { class: 'num incarnation', text: String(e.incarnation) }),
      el('td', { class: 'addresses', text: addresses(e) }),
      zone(e),
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
    renderEvacuations(v);
    renderRollout(ro);
    shown = v.revision;
    showStale(v.stale ? 'STALE: this node\'s view is ' + duration(v.age_seconds) + ' old; its DNS answers say so (EDE 3; SERVFAIL past --max-stale).' : '');
    const elig = v.endpoints.filter((e) => e.eligible).length;
    const count = (state, what) => {
      const k = v.endpoints.filter((e) => e.evacuation === state).length;
      return k ? ', ' + k + ' ' + what : '';
    };
    $('summary').textContent = v.endpoints.length + ' instances, ' + elig + ' eligible' + count('evacuated', 'in an evacuated zone') +
      count('returning', 'in a returning zone') + '; view revision ' + v.revision +
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
    const path = 'services/' + encodeURIComponent(ns) + '/' + encodeURIComponent(svc);
    render(...await Promise.all([get(path), get(path + '/rollout')]));
  }, (st, err) => showStale(staleness(st, err ? err.message || String(err) : null, shown)), { table: true });
})();
