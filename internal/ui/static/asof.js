// The service page's history: a chart of the eligible instances per
// zone over this node's history of the service (GET .../history), with
// withdrawals, admissions and evacuations as marks, and an "as of"
// control that replays what a caller was told at a time (GET .../view,
// as `cairn replay` shows it): the table in force, its DNS answers and
// xDS assignments, each endpoint's last transition, and what changed in
// the minute before. Drawn as SVG by hand: the dashboard has no build
// step.
'use strict';

(() => {
  const { $, get, el } = cairn;
  const q = new URLSearchParams(location.search);
  const ns = q.get('ns') || '';
  const svc = q.get('svc') || '';
  if (!ns || !svc) return;
  const base = 'services/' + encodeURIComponent(ns) + '/' + encodeURIComponent(svc);
  const svgNS = 'http://www.w3.org/2000/svg';
  const W = 760, H = 180, L = 36, R = 8, T = 8, B = 34; // the plot's box in the viewBox

  function svgEl(tag, attrs, text) {
    const e = document.createElementNS(svgNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  const colors = ['#2b6cb0', '#c05621', '#2f855a', '#6b46c1', '#b83280', '#2c7a7b', '#975a16', '#4a5568'];
  const markGlyph = { withdrawal: '▼', admission: '▲' };

  let span = null; // the chart's [from, to] in ms, for clicks

  // draw draws the history h: a step line per zone, the marks below.
  function draw(h) {
    const svg = $('chart');
    svg.replaceChildren();
    const from = Date.parse(h.from), to = Date.parse(h.to);
    span = [from, to];
    let max = 1;
    for (const z of h.zones) for (const p of z.points) max = Math.max(max, p.eligible);
    const x = (t) => L + (W - L - R) * (t - from) / Math.max(to - from, 1);
    const y = (n) => T + (H - T - B) * (1 - n / max);
    svg.append(svgEl('line', { x1: L, y1: y(0), x2: W - R, y2: y(0), class: 'axis' }));
    svg.append(svgEl('text', { x: L - 4, y: y(max) + 4, 'text-anchor': 'end', class: 'tick' }, String(max)));
    svg.append(svgEl('text', { x: L - 4, y: y(0) + 4, 'text-anchor': 'end', class: 'tick' }, '0'));
    svg.append(svgEl('text', { x: L, y: H - 4, class: 'tick' }, new Date(from).toLocaleTimeString()));
    svg.append(svgEl('text', { x: W - R, y: H - 4, 'text-anchor': 'end', class: 'tick' }, new Date(to).toLocaleTimeString()));
    const legend = $('chart-legend');
    legend.replaceChildren();
    h.zones.forEach((z, i) => {
      const color = colors[i % colors.length];
      let d = '';
      let last = null;
      for (const p of z.points) {
        const px = x(Math.max(Date.parse(p.at), from));
        d += last === null ? 'M' + px + ',' + y(p.eligible) : 'H' + px + 'V' + y(p.eligible);
        last = p.eligible;
      }
      d += 'H' + x(to);
      const name = (z.region ? z.region + '/' : '') + (z.zone || '(no zone)');
      svg.append(svgEl('path', { d, class: 'series', stroke: color, 'data-zone': z.zone, 'data-last': String(last) }));
      legend.append(el('span', { class: 'legend-item', 'data-zone': z.zone, style: 'color:' + color, text: '— ' + name + ' (' + last + ' now)' }), ' ');
    });
    for (const m of h.marks) {
      const glyph = markGlyph[m.kind] || '◆';
      const title = m.kind.replace('_', ' ') + (m.instance_id ? ' of ' + m.instance_id : '') + (m.zone ? ' in ' + m.zone : '') +
        (m.detail ? ': ' + m.detail : '') + ' at ' + new Date(m.at).toLocaleTimeString();
      const t = svgEl('text', { x: x(Date.parse(m.at)), y: H - B + 16, 'text-anchor': 'middle', class: 'mark mark-' + m.kind,
        'data-kind': m.kind, 'data-at': m.at }, glyph);
      t.append(svgEl('title', {}, title));
      svg.append(t);
    }
    if (h.zones.length === 0) svg.append(svgEl('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'tick' }, 'no history yet'));
  }

  async function loadChart() {
    try {
      draw(await get(base + '/history'));
    } catch (e) {
      $('chart-legend').textContent = 'No history: ' + (e.message || String(e));
    }
  }

  // localValue writes a time as datetime-local's value, in local time.
  function localValue(ms) {
    const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000);
    return d.toISOString().slice(0, 19);
  }

  $('chart').addEventListener('click', (ev) => {
    if (!span) return;
    const box = $('chart').getBoundingClientRect();
    const vx = (ev.clientX - box.left) * W / box.width;
    const t = span[0] + (span[1] - span[0]) * Math.min(Math.max((vx - L) / (W - L - R), 0), 1);
    $('asof').value = localValue(t);
    replay();
  });

  function cells(tr, ...texts) {
    for (const t of texts) tr.append(typeof t === 'string' ? el('td', { text: t }) : t);
    return tr;
  }

  function state(e) {
    return e ? e.verdict + ' ' + e.lifecycle + (e.eligible ? ', eligible w' + e.weight : ', out') : '-';
  }

  function transition(e) {
    const t = e.transition;
    if (!t) return e.reason || '-';
    let s = new Date(t.at).toLocaleTimeString() + ': ' + (t.from || '-') + ' → ' + (t.to || '-') + (t.reason ? ' (' + t.reason + ')' : '');
    if (t.evidence) s += ', ' + t.evidence.class + ' by ' + t.evidence.observer + (e.evidence_age_seconds != null ? ', ' + Math.round(e.evidence_age_seconds) + 's old' : '');
    return s;
  }

  function show(r) {
    $('replay').hidden = false;
    document.body.classList.add('as-of');
    $('replay-summary').textContent = 'AS OF ' + new Date(r.at).toLocaleString() + ' for a caller in ' +
      ((r.region || r.zone) ? (r.region || '-') + '/' + (r.zone || '-') : 'this node\'s place') + ': status table ' + r.table_version +
      ' (store revision ' + r.table_revision + ', built ' + new Date(r.table_built).toLocaleTimeString() + '); the node was ' + r.freshness +
      (r.health_disregarded ? '; HEALTH DISREGARDED' : '') + '. History since ' + new Date(r.history_since).toLocaleString() + '.';
    $('replay-endpoints').tBodies[0].replaceChildren(...r.endpoints.map((e) => cells(el('tr', { 'data-instance': e.instance_id, class: 'lc-' + e.lifecycle }),
      e.instance_id, e.addresses.join(', '), e.zone || '-', el('td', { class: 'num tier', text: String(e.tier) }), el('td', { class: 'lifecycle', text: e.lifecycle }),
      el('td', { class: 'verdict v-' + e.verdict, text: e.verdict }), el('td', { class: 'eligible ' + (e.eligible ? 'yes' : 'no'), text: e.eligible ? 'yes' : 'no' }),
      e.weight + ' / ' + e.base_weight, el('td', { class: 'transition', text: transition(e) }))));
    $('replay-dns').tBodies[0].replaceChildren(...r.dns.map((d) => cells(el('tr', { 'data-type': d.type }),
      d.name, d.type, d.rcode + ((d.ede || []).length ? ' EDE ' + d.ede.join('; ') : ''),
      el('td', { class: 'answer' }, ...(d.answer.length ? d.answer.map((a) => el('div', { text: a })) : ['-']),
        ...(d.sampled ? [el('div', { class: 'muted', text: 'a sample, by weight' })] : [])))));
    const xrows = [];
    for (const x of r.xds) {
      if (x.endpoints.length === 0) xrows.push(cells(el('tr'), x.cluster, x.version, '-', '-', '-', '-', '-'));
      for (const e of x.endpoints) {
        xrows.push(cells(el('tr', { 'data-address': e.address }), x.cluster, x.version, e.address, e.zone || '-',
          el('td', { class: 'num', text: String(e.priority) }), el('td', { class: 'num', text: String(e.weight) }), e.health));
      }
    }
    $('replay-xds').tBodies[0].replaceChildren(...xrows);
    $('replay-changes').tBodies[0].replaceChildren(...r.changes.map((c) => cells(el('tr'),
      new Date(c.at).toLocaleTimeString(), c.instance_id, state(c.before), state(c.after))));
  }

  async function replay() {
    const v = $('asof').value;
    if (!v) return;
    const params = { at: new Date(v).toISOString() };
    if ($('asof-region').value) params.region = $('asof-region').value;
    if ($('asof-zone').value) params.zone = $('asof-zone').value;
    try {
      show(await get(base + '/view?' + new URLSearchParams(params)));
    } catch (e) {
      $('replay').hidden = false;
      $('replay-summary').textContent = 'Cannot replay: ' + (e.message || String(e));
      for (const id of ['replay-endpoints', 'replay-dns', 'replay-xds', 'replay-changes']) $(id).tBodies[0].replaceChildren();
    }
  }

  $('asof-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    replay();
  });
  $('asof-clear').addEventListener('click', () => {
    $('asof').value = '';
    $('replay').hidden = true;
    document.body.classList.remove('as-of');
  });

  loadChart();
  setInterval(() => {
    if (!document.hidden) loadChart();
  }, 10000);
})();
