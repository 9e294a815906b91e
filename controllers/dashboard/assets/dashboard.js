// The dashboard's page script: polls api/state and renders it. Object data
// only ever reaches the DOM as text (textContent, attribute values), never
// as markup, so a name or an Event message cannot inject anything; the
// Content-Security-Policy forbids inline script besides.
'use strict';

(function () {
  const POLL_MS = 5000;
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];
  // Hit-ratio lines beyond this many volumes would be unreadable: the
  // chart shows the volumes that read the most.
  const MAX_SERIES = 8;

  // formatBytes: "512 B", "1.50 GiB" (binary units, two decimals).
  function formatBytes(n) {
    if (typeof n !== 'number') return '';
    if (Math.abs(n) < 1024) return n + ' B';
    let v = n;
    let i = 0;
    while (Math.abs(v) >= 1024 && i < UNITS.length - 1) {
      v /= 1024;
      i++;
    }
    return v.toFixed(2) + ' ' + UNITS[i];
  }

  // formatTime: RFC 3339 from the server, shown in UTC without a locale.
  function formatTime(iso) {
    return String(iso).replace('T', ' ').replace(/(\.\d+)?Z$/, ' UTC');
  }

  function clockTime(iso) {
    const m = /T(\d\d:\d\d:\d\d)/.exec(String(iso));
    return m ? m[1] : String(iso);
  }

  // el builds an element; children are nodes or strings (text nodes).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    for (const c of children) e.append(typeof c === 'string' ? document.createTextNode(c) : c);
    return e;
  }

  function svg(tag, attrs) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }

  // Cells carry data-field, and numeric ones their raw value in data-value,
  // so the page can be checked figure by figure.
  function text(field, value) {
    return el('td', { 'data-field': field }, String(value === undefined || value === null ? '' : value));
  }
  function count(field, value) {
    return el('td', { 'data-field': field, 'data-value': value, class: 'num' }, String(value));
  }
  function bytes(field, value) {
    return el('td', { 'data-field': field, 'data-value': value, class: 'num' }, formatBytes(value));
  }
  function condition(field, status) {
    const cls = status === 'True' ? 'ok' : status === 'False' ? 'bad' : 'unknown';
    return el('td', { 'data-field': field, class: cls }, status);
  }

  function fillBody(tableId, rows, columns, emptyText) {
    const body = document.querySelector('#' + tableId + ' tbody');
    if (rows.length === 0) {
      body.replaceChildren(el('tr', {}, el('td', { colspan: columns, class: 'empty' }, emptyText)));
    } else {
      body.replaceChildren(...rows);
    }
  }

  function renderPools(pools) {
    fillBody('pools', pools.map((p) => el('tr', { 'data-pool': p.name },
      text('name', p.name),
      condition('ready', p.ready),
      el('td', { 'data-field': 'servers', 'data-ready': p.readyServers, 'data-total': p.totalServers, class: 'num' },
        p.readyServers + ' / ' + p.totalServers),
      bytes('capacity', p.capacityBytes),
      bytes('allocated', p.allocatedBytes),
      count('volumes', p.volumes),
      el('td', { 'data-field': 'reason', title: p.message }, p.reason))), 7, 'no cache pools');
  }

  function renderServers(pools) {
    const rows = [];
    for (const p of pools) {
      for (const s of p.servers) {
        const devices = el('ul', { class: 'devices' }, ...s.devices.map((d) => el('li', {
          'data-device': d.name,
          'data-capacity': d.capacityBytes,
          'data-used': d.usedBytes,
          'data-free': d.freeBytes,
        }, d.name + ': ' + formatBytes(d.usedBytes) + ' / ' + formatBytes(d.capacityBytes) +
           ', ' + formatBytes(d.freeBytes) + ' free')));
        rows.push(el('tr', { 'data-pool': p.name, 'data-server': s.node },
          text('pool', p.name),
          text('node', s.node),
          text('rack', s.rack),
          text('address', s.address),
          el('td', { 'data-field': 'ready', class: s.ready ? 'ok' : 'bad', title: s.message }, s.ready ? 'True' : 'False'),
          bytes('capacity', s.capacityBytes),
          bytes('allocated', s.allocatedBytes),
          count('volumes', s.volumes),
          el('td', { 'data-field': 'devices' }, devices)));
      }
    }
    fillBody('servers', rows, 9, 'no cache servers');
  }

  function renderVolumes(volumes) {
    fillBody('volumes', volumes.map((v) => el('tr', { 'data-volume': v.name },
      text('name', v.name),
      text('pool', v.pool),
      text('server', v.server),
      text('phase', v.phase),
      text('writeMode', v.writeMode),
      condition('ready', v.ready),
      el('td', { 'data-field': 'hitRatio', class: 'num' }, v.hitRatio),
      bytes('dirty', v.dirtyBytes),
      bytes('read', v.readBytes),
      bytes('written', v.writtenBytes))), 10, 'no cached volumes');
  }

  function renderEvents(events, error) {
    const note = document.getElementById('events-error');
    note.hidden = !error;
    note.textContent = error ? 'Events cannot be read: ' + error : '';
    fillBody('events', events.map((e, i) => el('tr', { 'data-event': i },
      el('td', { 'data-field': 'time', 'data-value': e.time }, formatTime(e.time)),
      el('td', { 'data-field': 'type', class: e.type === 'Warning' ? 'bad' : '' }, e.type),
      text('object', e.kind + '/' + e.name),
      text('reason', e.reason),
      text('message', e.message),
      count('count', e.count))), 6, 'no recent events');
  }

  // lineChart draws series (each {name, values}, one value or null per
  // sample) over the samples' times, y from 0 to yMax.
  function lineChart(id, title, times, series, yMax, format) {
    const W = 380, H = 180, L = 72, R = 12, T = 10, B = 24;
    const w = W - L - R, h = H - T - B;
    const t0 = times.length ? Date.parse(times[0]) : 0;
    const t1 = times.length ? Date.parse(times[times.length - 1]) : 0;
    const x = (t) => L + (t1 > t0 ? (Date.parse(t) - t0) / (t1 - t0) : 0.5) * w;
    const y = (v) => T + h - (yMax > 0 ? Math.min(v / yMax, 1) : 0) * h;

    const chart = svg('svg', {
      class: 'chart', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H,
      role: 'img', 'aria-label': title, 'data-chart': id, 'data-samples': times.length,
    });
    for (const f of [0, 0.5, 1]) {
      chart.append(svg('line', { class: 'grid', x1: L, x2: L + w, y1: T + h * f, y2: T + h * f }));
    }
    chart.append(svg('rect', { class: 'frame', x: L, y: T, width: w, height: h }));
    const label = (s, attrs) => {
      const t = svg('text', attrs);
      t.textContent = s;
      chart.append(t);
    };
    label(format(yMax), { x: L - 6, y: T + 4, 'text-anchor': 'end' });
    label(format(0), { x: L - 6, y: T + h + 4, 'text-anchor': 'end' });
    if (times.length) {
      label(clockTime(times[0]), { x: L, y: H - 6, 'text-anchor': 'start' });
      label(clockTime(times[times.length - 1]), { x: L + w, y: H - 6, 'text-anchor': 'end' });
    }
    const legend = el('ul', { class: 'legend' });
    series.forEach((s, i) => {
      const pts = [];
      s.values.forEach((v, j) => {
        if (typeof v === 'number') pts.push(x(times[j]).toFixed(1) + ',' + y(v).toFixed(1));
      });
      chart.append(svg('polyline', {
        class: 'c' + (i % 8), points: pts.join(' '), 'data-series': s.name, 'data-points': pts.length,
      }));
      legend.append(el('li', {}, el('span', { class: 'swatch c' + (i % 8) }), s.name));
    });
    return el('figure', { 'data-figure': id }, el('figcaption', {}, title), chart, legend);
  }

  function maxOf(series) {
    let m = 0;
    for (const s of series) for (const v of s.values) if (typeof v === 'number' && v > m) m = v;
    return m;
  }

  function renderCharts(history, volumes) {
    const times = history.map((s) => s.time);
    const busiest = volumes.slice().sort((a, b) => b.readBytes - a.readBytes || (a.name < b.name ? -1 : 1))
      .slice(0, MAX_SERIES).map((v) => v.name).sort();
    const hit = busiest.map((name) => ({
      name: name,
      values: history.map((s) => (s.volumes[name] ? s.volumes[name].hitRatio : null)),
    }));
    const io = [
      { name: 'read', values: history.map((s) => s.readBytes) },
      { name: 'written', values: history.map((s) => s.writtenBytes) },
    ];
    const dirty = [{ name: 'dirty', values: history.map((s) => s.dirtyBytes) }];
    document.getElementById('charts').replaceChildren(
      lineChart('hit-ratio', 'Read hit ratio per volume', times, hit, 100, (v) => v + '%'),
      lineChart('io', 'I/O volume, all volumes (cumulative)', times, io, maxOf(io), formatBytes),
      lineChart('dirty', 'Dirty bytes, all volumes', times, dirty, maxOf(dirty), formatBytes));
  }

  function render(state) {
    renderPools(state.pools);
    renderServers(state.pools);
    renderVolumes(state.volumes);
    renderCharts(state.history, state.volumes);
    renderEvents(state.events, state.eventsError);
    const status = document.getElementById('status');
    status.dataset.state = 'ok';
    status.dataset.samples = state.history.length;
    status.textContent = 'updated ' + formatTime(state.generatedAt) + ' · ' + state.history.length +
      ' samples, one every ' + state.samplePeriodSeconds + ' s';
    document.getElementById('error').hidden = true;
  }

  function showError(message) {
    const box = document.getElementById('error');
    box.textContent = 'Cannot load the state: ' + message + ' (retrying)';
    box.hidden = false;
    document.getElementById('status').dataset.state = 'error';
  }

  async function poll() {
    try {
      const resp = await fetch('api/state', { cache: 'no-store', credentials: 'same-origin' });
      if (!resp.ok) throw new Error(resp.status + ' ' + (await resp.text()));
      render(await resp.json());
    } catch (err) {
      showError(err.message);
    }
    setTimeout(poll, POLL_MS);
  }

  poll();
})();
