// The services page: GET /v1/services, filtered by namespace.
'use strict';

(() => {
  const { $, get, el, flagList, follow } = cairn;
  const filter = $('ns-filter');
  let services = [];

  function selected() {
    return new URLSearchParams(location.search).get('ns') || '';
  }

  function render() {
    const ns = selected();
    const namespaces = [...new Set(services.map((s) => s.namespace))].sort();
    if (ns && !namespaces.includes(ns)) namespaces.push(ns);
    filter.replaceChildren(el('option', { value: '', text: 'all namespaces' }),
      ...namespaces.map((n) => el('option', { value: n, text: n })));
    filter.value = ns;

    const shown = services.filter((s) => !ns || s.namespace === ns);
    const rows = shown.map((s) => {
      const href = 'service.html?' + new URLSearchParams({ ns: s.namespace, svc: s.name });
      const flags = s.health_disregarded ? ['health_disregarded'] : [];
      const tr = el('tr', { 'data-service': s.namespace + '/' + s.name },
        el('td', { class: 'ns', text: s.namespace }),
        el('td', { class: 'name' }, el('a', { href, text: s.name })),
        el('td', { class: 'num instances', text: String(s.instances) }),
        el('td', { class: 'num eligible' + (s.eligible < s.instances ? ' short' : ''), text: String(s.eligible) }),
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
    const q = new URLSearchParams(location.search);
    if (filter.value) q.set('ns', filter.value);
    else q.delete('ns');
    history.replaceState(null, '', q.toString() ? '?' + q : location.pathname);
    render();
  });

  follow(async () => {
    services = await get('services');
    render();
  });
})();
