// The events page: GET /v1/services/{ns}/{svc}/events, the audit trail
// `cairn events` prints, newest first, filtered by kind and instance in
// the browser (the filters are kept in the URL).
'use strict';

(() => {
  const { $, get, el, follow } = cairn;
  const q = new URLSearchParams(location.search);
  const ns = q.get('ns') || '';
  const svc = q.get('svc') || '';
  const filter = { kind: q.get('kind') || '', instance: q.get('instance') || '' };
  // limit is how much of the trail one load fetches: the newest events.
  const limit = 1000;
  // The kinds docs/api.md lists, offered even before one occurs.
  const kinds = ['applied', 'registered', 'drained', 'deregistered', 'terminated', 'expired', 'reported', 'refused',
    'eligibility', 'health_disregarded', 'health_restored', 'quarantined', 'probes_set_aside', 'probes_restored',
    'evacuated', 'evacuation_ended', 'evacuation_paused', 'evacuation_returned'];
  let events = [];

  document.title = 'cairn · events · ' + ns + '/' + svc;
  $('title').textContent = 'Events of ' + ns + '/' + svc;
  $('service-link').textContent = ns + '/' + svc;
  $('service-link').href = 'service.html?' + new URLSearchParams({ ns, svc });

  // when shows an instant as local time to the millisecond; the full
  // timestamp is its title.
  function when(s) {
    const d = new Date(s);
    const p = (n, w) => String(n).padStart(w || 2, '0');
    return p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds()) + '.' + p(d.getMilliseconds(), 3);
  }

  function evidence(ev) {
    if (!ev) return null;
    return el('span', { class: 'ev', title: ev.at },
      el('span', { class: 'ev-class', text: ev.class }), ' by ',
      el('span', { class: 'ev-observer', text: ev.observer }), ' at ' + when(ev.at));
  }

  // setOptions fills a filter's select: "all", then values, keeping the
  // current choice even when no loaded event has it.
  function setOptions(sel, all, values, current) {
    const vs = [...new Set([...values, ...(current ? [current] : [])])];
    sel.replaceChildren(el('option', { value: '', text: all }), ...vs.map((v) => el('option', { value: v, text: v })));
    sel.value = current;
  }

  // change is the event's transition: "draining → terminated", "→ ready"
  // when it has no state before (a registration, an evacuation's start).
  function change(e) {
    if (!e.from && !e.to) return '-';
    return (e.from ? e.from + ' ' : '') + '→ ' + (e.to || '?');
  }

  function shown(e) {
    return (!filter.kind || e.kind === filter.kind) && (!filter.instance || e.instance_id === filter.instance);
  }

  function render() {
    const instances = [...new Set(events.map((e) => e.instance_id).filter(Boolean))].sort();
    setOptions($('kind-filter'), 'all kinds', [...new Set([...kinds, ...events.map((e) => e.kind)])], filter.kind);
    setOptions($('instance-filter'), 'all instances', instances, filter.instance);
    const list = events.filter(shown).reverse(); // newest first
    const rows = list.map((e) => {
      let cls = 'k-' + e.kind;
      if (e.kind === 'eligibility') cls += (e.to || '').startsWith('withdrawn') ? ' out' : ' in';
      // An evacuation's events say its zone went last (out), came back
      // (in) or stopped coming back (paused: out).
      if (e.kind === 'evacuated' || e.kind === 'evacuation_paused' && e.to === 'paused') cls += ' out';
      else if (e.kind.startsWith('evacuation_')) cls += ' in';
      // An evacuation of a zone for every service is in every service's
      // trail, without a service of its own: the cell says so.
      const inst = e.instance_id
        ? el('a', { href: '?' + new URLSearchParams({ ns, svc, instance: e.instance_id }), text: e.instance_id },
          e.incarnation ? '#' + e.incarnation : '')
        : !e.namespace && !e.service ? el('span', { class: 'muted', title: 'an event of an evacuation of a zone for every service', text: 'every service' }) : '-';
      return el('tr', { 'data-seq': String(e.seq), 'data-kind': e.kind, 'data-instance': e.instance_id || '', class: cls },
        el('td', { class: 'at', title: e.at, text: when(e.at) }),
        el('td', { class: 'kind', text: e.kind }),
        el('td', { class: 'instance' }, inst),
        el('td', { class: 'change', text: change(e) }),
        el('td', { class: 'reason', text: e.reason || '-' }),
        el('td', { class: 'evidence' }, evidence(e.evidence) || '-'),
        el('td', { class: 'actor', text: e.actor || '-' }),
        el('td', { class: 'num seq', text: String(e.seq) }));
    });
    $('events').tBodies[0].replaceChildren(...rows);
    $('empty').hidden = rows.length > 0;
    $('summary').textContent = rows.length + ' of the newest ' + events.length + ' events' +
      (events.length >= limit ? ' (the trail may hold older ones)' : '') + '; updated ' + new Date().toLocaleTimeString();
  }

  // A filter change rewrites the URL (no reload, no new history entry)
  // and filters what was loaded.
  function onFilter(key, sel) {
    sel.addEventListener('change', () => {
      filter[key] = sel.value;
      const u = new URLSearchParams({ ns, svc });
      if (filter.instance) u.set('instance', filter.instance);
      if (filter.kind) u.set('kind', filter.kind);
      history.replaceState(null, '', '?' + u);
      render();
    });
  }
  onFilter('kind', $('kind-filter'));
  onFilter('instance', $('instance-filter'));

  if (!ns || !svc) {
    $('error').textContent = 'No service named: open this page from a service page.';
    $('error').hidden = false;
    return;
  }
  follow(async () => {
    events = await get('services/' + encodeURIComponent(ns) + '/' + encodeURIComponent(svc) + '/events?limit=' + limit);
    render();
  });
})();
