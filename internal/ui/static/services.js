// The services page: GET /v1/services, filtered by namespace, sorted by
// a column, with each service's counts per zone, and the node's revision:
// how long since it last changed, and loudly whether the page is stale.
'use strict';

(() => {
  const { $, get, el, flagList, follow, duration, staleness } = cairn;
  const filter = $('ns-filter');
  let services = [];

  // Sortable columns: ?sort=KEY ascending, ?sort=-KEY descending. Ties,
  // and the default, go by namespace then name.
  const byName = (a, b) => a.namespace.localeCompare(b.namespace) || a.name.localeCompare(b.name);
  const sorts = {
    namespace: byName,
    name: (a, b) => a.name.localeCompare(b.name) || a.namespace.localeCompare(b.namespace),
    instances: (a, b) => a.instances - b.instances,
    eligible: (a, b) => a.eligible - b.eligible,
    revision: (a, b) => a.revision - b.revision,
  };

  function query() {
    return new URLSearchParams(location.search);
  }

  function selected() {
    return query().get('ns') || '';
  }

  // sortOrder is the URL's sort: its key (one of sorts) and direction.
  function sortOrder() {
    const v = query().get('sort') || '';
    const desc = v.startsWith('-');
    const key = desc ? v.slice(1) : v;
    return sorts[key] ? { key, desc } : { key: '', desc: false };
  }

  function setQuery(q) {
    history.replaceState(null, '', q.toString() ? '?' + q : location.pathname);
  }

  // zoneCell renders "a 3/3 · b 2/4": per zone, eligible / instances.
  function zoneCell(s) {
    const td = el('td', { class: 'zones' });
    (s.zones || []).forEach((z, i) => {
      if (i > 0) td.append(' · ');
      const name = z.zone || '(no zone)';
      td.append(el('span', {
        class: 'zone' + (z.eligible < z.instances ? ' short' : ''),
        'data-zone': z.zone,
        title: name + ': ' + z.eligible + ' of ' + z.instances + ' instances eligible',
        text: name + ' ' + z.eligible + '/' + z.instances,
      }));
    });
    if (!td.childNodes.length) td.textContent = '-';
    return td;
  }

  function renderHeaders() {
    const { key, desc } = sortOrder();
    for (const th of document.querySelectorAll('#services th[data-sort]')) {
      const k = th.dataset.sort;
      if (k === key) th.setAttribute('aria-sort', desc ? 'descending' : 'ascending');
      else th.removeAttribute('aria-sort');
    }
  }

  function render() {
    const ns = selected();
    const namespaces = [...new Set(services.map((s) => s.namespace))].sort();
    if (ns && !namespaces.includes(ns)) namespaces.push(ns);
    filter.replaceChildren(el('option', { value: '', text: 'all namespaces' }),
      ...namespaces.map((n) => el('option', { value: n, text: n })));
    filter.value = ns;

    const { key, desc } = sortOrder();
    const cmp = sorts[key] || byName;
    const shown = services.filter((s) => !ns || s.namespace === ns)
      .sort((a, b) => (desc ? -cmp(a, b) : cmp(a, b)) || byName(a, b));
    renderHeaders();
    const rows = shown.map((s) => {
      const href = 'service.html?' + new URLSearchParams({ ns: s.namespace, svc: s.name });
      const flags = s.health_disregarded ? ['health_disregarded'] : [];
      const tr = el('tr', { 'data-service': s.namespace + '/' + s.name },
        el('td', { class: 'ns', text: s.namespace }),
        el('td', { class: 'name' }, el('a', { href, text: s.name })),
        el('td', { class: 'num instances', text: String(s.instances) }),
        el('td', { class: 'num eligible' + (s.eligible < s.instances ? ' short' : ''), text: String(s.eligible) }),
        zoneCell(s),
        el('td', { class: 'num revision', text: String(s.revision) }),
        el('td', { class: 'flags-cell' }, flagList(flags)));
      if (s.health_disregarded) tr.classList.add('disregarded');
      return tr;
    });
    $('services').tBodies[0].replaceChildren(...rows);
    $('empty').hidden = rows.length > 0;

    const loud = shown.filter((s) => s.health_disregarded);
    const banner = $('disregarded');
    banner.hidden = loud.length === 0;
    banner.textContent = 'HEALTH DISREGARDED in ' + loud.map((s) => s.namespace + '/' + s.name).join(', ') +
      ': too many instances failed at once, so the guard serves them all whatever their health.';
    const inst = shown.reduce((n, s) => n + s.instances, 0);
    const elig = shown.reduce((n, s) => n + s.eligible, 0);
    const plural = (k, word) => k + ' ' + word + (k === 1 ? '' : 's');
    $('summary').textContent = plural(shown.length, 'service') + ', ' + plural(inst, 'instance') + ', ' + elig + ' eligible; updated ' +
      new Date().toLocaleTimeString();
    // The browser test reads this mark to time a render (never asserted).
    performance.mark('cairn.services.rendered', { detail: rows.length });
  }

  filter.addEventListener('change', () => {
    const q = query();
    if (filter.value) q.set('ns', filter.value);
    else q.delete('ns');
    setQuery(q);
    render();
  });

  // A header click sorts by its column, ascending first, then toggles.
  for (const th of document.querySelectorAll('#services th[data-sort]')) {
    th.querySelector('button').addEventListener('click', () => {
      const { key, desc } = sortOrder();
      const k = th.dataset.sort;
      const q = query();
      q.set('sort', k === key && !desc ? '-' + k : k);
      setQuery(q);
      render();
    });
  }

  // The view's revision: when the page last saw it change, and whether
  // what it shows may be stale (the node is not caught up, or the last
  // poll failed).
  let revision = null;
  let changedAt = null; // when the page saw revision change (or first saw it)
  let firstSeen = true;
  let lastStatus = null;
  let failure = null;

  function ago(ms) {
    return duration(ms / 1000) + ' ago';
  }

  function renderRevision() {
    const rev = $('view-revision');
    if (revision === null) {
      rev.textContent = 'revision unknown';
    } else {
      rev.textContent = 'revision ' + revision + (firstSeen ? ', unchanged since the page opened ' : ', changed ') +
        ago(Date.now() - changedAt);
    }
    const why = staleness(lastStatus, failure, revision);
    const banner = $('stale');
    banner.hidden = !why;
    banner.textContent = why;
    document.body.classList.toggle('stale', !!why);
  }

  function watch(st, err) {
    if (err) {
      failure = err.message || String(err);
    } else {
      failure = null;
      lastStatus = st;
      if (st.revision !== revision) {
        firstSeen = revision === null;
        revision = st.revision;
        changedAt = Date.now();
      }
    }
    renderRevision();
  }

  follow(async () => {
    services = await get('services');
    render();
  }, watch);
})();
