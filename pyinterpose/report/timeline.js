/* pyinterpose memory timeline (written for pyinterpose; drawn with plotly.js).
 *
 * Reads the payload of report/timeline.py from <script class="pit-tl-data">, inflates
 * its typed arrays, and draws: the stacked live bytes (by lifetime class or by owner)
 * at a level of detail that follows the zoom (at most BINS bins across the view; each
 * bin keeps its peak and its last value, so no peak is lost; an exact step curve once
 * the view holds fewer events than that), NVML used memory, iteration bands under the
 * data, an event-index axis (bottom) and a time axis (top), a minimap of the whole run,
 * and a readout of the block under the cursor.
 */
(function () {
  'use strict';
  var SCRIPT_START = performance.now();
  var BINS = 1200, CHECK = 4096, NEVER = 0xFFFFFFFF;
  var PALETTE = ['#4C72B0', '#DD8452', '#55A868', '#C44E52', '#8172B3', '#937860', '#DA8BC3', '#8C8C8C',
                 '#CCB974', '#64B5CD', '#2F4B7C', '#A05195'];
  var CLASS_COLOURS = {persistent: '#4C72B0', cross_iteration: '#8172B3', per_iteration: '#DD8452',
                       transient: '#55A868', outside: '#BBBBBB', other: '#8C8C8C', live: '#4C72B0',
                       reserved: '#4C72B0'};

  function fmtBytes(n) {
    var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0, s = n < 0 ? '-' : '';
    n = Math.abs(n);
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return s + (i === 0 ? Math.round(n) + ' B' : n.toFixed(1) + ' ' + u[i]);
  }
  function fmtNs(ns) {
    var a = Math.abs(ns);
    if (a < 1e3) return ns.toFixed(0) + ' ns';
    if (a < 1e6) return (ns / 1e3).toFixed(1) + ' us';
    if (a < 1e9) return (ns / 1e6).toFixed(1) + ' ms';
    return (ns / 1e9).toFixed(2) + ' s';
  }
  function fmtTick(ns, step) {
    /* a time label precise enough to tell ticks ``step`` ns apart */
    var a = Math.abs(ns), u = a >= 1e9 ? [1e9, 's'] : a >= 1e6 ? [1e6, 'ms'] : a >= 1e3 ? [1e3, 'us'] : [1, 'ns'];
    var d = step > 0 ? Math.max(0, Math.min(6, Math.ceil(-Math.log10(step / u[0])) + 1)) : 1;
    return (ns / u[0]).toFixed(d) + ' ' + u[1];
  }
  function byteTicks(top) {
    /* ticks in binary units (MiB, GiB) at 1/2/5 x 10^k steps, about five of them */
    var units = [[1, 'B'], [1024, 'KiB'], [1048576, 'MiB'], [1073741824, 'GiB'], [1099511627776, 'TiB']], u = units[0];
    for (var i = 0; i < units.length; i++) if (top / units[i][0] >= 2) u = units[i];
    var v = top / u[0], raw = v / 5, p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-9)))), step = p;
    [1, 2, 2.5, 5, 10].forEach(function (m) { if (p * m <= raw * 1.0001) step = p * m; });
    if (step < raw / 1.5) step *= 2;
    var vals = [], text = [];
    for (var x = 0; x <= v + 1e-9; x += step) { vals.push(x * u[0]); text.push((+x.toFixed(6)).toLocaleString('en-US') + ' ' + u[1]); }
    return {vals: vals, text: text};
  }
  function fmtInt(n) { return Math.round(n).toLocaleString('en-US'); }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) { return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c]; });
  }

  var CTORS = {uint8: Uint8Array, uint16: Uint16Array, uint32: Uint32Array, int32: Int32Array, float64: Float64Array};
  function b64bytes(b64) {
    var bin = atob(b64), out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  function inflate(spec) {
    var ds = new DecompressionStream('gzip');
    var stream = new Blob([b64bytes(spec.b64)]).stream().pipeThrough(ds);
    return new Response(stream).arrayBuffer().then(function (buf) {
      var C = CTORS[spec.dtype];
      var arr = new C(buf);
      if (arr.length !== spec.n) throw new Error('timeline: array length ' + arr.length + ' != ' + spec.n);
      return arr;
    });
  }

  /* ---- the model: blocks, events, group sums ----------------------------------------- */
  function Model(p, arrs) {
    var n = p.events, nb = p.blocks, i;
    this.p = p; this.n = n; this.nb = nb;
    var a = new Float64Array(nb), f = new Float64Array(nb), size = new Float64Array(nb);
    var acc = 0, bid = new Float64Array(nb), bacc = 0;
    for (i = 0; i < nb; i++) {
      acc += arrs.a[i]; a[i] = acc;
      f[i] = arrs.life[i] === NEVER ? Infinity : acc + arrs.life[i];
      size[i] = arrs.sizes[arrs.size_idx[i]];
      bacc += arrs.bid[i]; bid[i] = bacc;
    }
    this.a = a; this.f = f; this.size = size; this.bid = bid;
    this.cls = arrs.cls; this.own = arrs.own; this.api = arrs.api; this.site = arrs.site || null;
    var t = new Float64Array(n), tq = p.tq, tt = 0;
    for (i = 0; i < n; i++) { tt += arrs.t[i]; t[i] = tt * tq; }
    this.t = t;                                       // ns since the first event
    var delta = new Float64Array(n), evb = new Int32Array(n);
    for (i = 0; i < nb; i++) {
      delta[a[i]] += size[i]; evb[a[i]] = i;
      if (f[i] !== Infinity) { delta[f[i]] -= size[i]; if (f[i] !== a[i]) evb[f[i]] = i; }
    }
    this.delta = delta; this.evb = evb;
    this.modes = {};
  }
  Model.prototype.mode = function (name) {
    /* group codes per event and checkpoints of every group's live bytes every CHECK events */
    if (this.modes[name]) return this.modes[name];
    var codes = name === 'own' ? this.own : this.cls, names = this.p.names[name];
    var K = Math.max(1, names.length), n = this.n, evb = this.evb, delta = this.delta;
    var evc = new Uint8Array(n), i, k;
    for (i = 0; i < n; i++) evc[i] = codes[evb[i]];
    var nck = Math.floor(n / CHECK) + 1, ck = new Float64Array(nck * K), cur = new Float64Array(K);
    for (i = 0; i < n; i++) {
      if (i % CHECK === 0) for (k = 0; k < K; k++) ck[(i / CHECK) * K + k] = cur[k];
      cur[evc[i]] += delta[i];
    }
    var m = {name: name, names: names, K: K, evc: evc, ck: ck, codes: codes};
    this.modes[name] = m;
    return m;
  };
  Model.prototype.stateBefore = function (m, e) {
    /* every group's live bytes just before event e (e in [0, n]) */
    var K = m.K, c = Math.min(Math.floor(e / CHECK), Math.floor((this.n - 1) / CHECK)), k, i;
    if (c < 0) c = 0;
    var cur = new Float64Array(K);
    for (k = 0; k < K; k++) cur[k] = m.ck[c * K + k];
    for (i = c * CHECK; i < e; i++) cur[m.evc[i]] += this.delta[i];
    return cur;
  };
  Model.prototype.lod = function (m, x0, x1, bins) {
    /* points to draw for events [x0, x1]: per bin the event where the total peaks and the
       last event; every event when the range is short.  Returns {x: [...], g: [K][...]} with
       the group values after each chosen event. */
    var n = this.n, K = m.K;
    x0 = Math.max(0, Math.floor(x0)); x1 = Math.min(n - 1, Math.ceil(x1));
    var cur = this.stateBefore(m, x0), xs = [], gs = [], k, e;
    for (k = 0; k < K; k++) gs.push([]);
    var span = x1 - x0 + 1, exact = span <= 2 * bins;
    var tot = 0;
    for (k = 0; k < K; k++) tot += cur[k];
    if (x0 > 0) { xs.push(x0 - 1); for (k = 0; k < K; k++) gs[k].push(cur[k]); }
    if (exact) {
      for (e = x0; e <= x1; e++) {
        cur[m.evc[e]] += this.delta[e];
        xs.push(e); for (k = 0; k < K; k++) gs[k].push(cur[k]);
      }
      return {x: xs, g: gs, exact: true};
    }
    var w = span / bins, bi, next, peakV, peakE, peakS = new Float64Array(K);
    e = x0;
    for (bi = 0; bi < bins && e <= x1; bi++) {
      next = Math.min(x1 + 1, Math.floor(x0 + (bi + 1) * w));
      if (next <= e) continue;
      peakV = -Infinity; peakE = -1;
      for (; e < next; e++) {
        var c = m.evc[e], d = this.delta[e];
        cur[c] += d; tot += d;
        if (tot > peakV) { peakV = tot; peakE = e; for (k = 0; k < K; k++) peakS[k] = cur[k]; }
      }
      if (peakE !== e - 1) { xs.push(peakE); for (k = 0; k < K; k++) gs[k].push(peakS[k]); }
      xs.push(e - 1); for (k = 0; k < K; k++) gs[k].push(cur[k]);
    }
    return {x: xs, g: gs, exact: false};
  };
  Model.prototype.blockAt = function (m, e, y) {
    /* the block drawn at event e (after it) and height y: groups stack bottom-up in code
       order, blocks inside a group in allocation order */
    e = Math.round(e);
    if (e < 0 || e >= this.n || y < 0) return null;
    var cur = this.stateBefore(m, e + 1), base = 0, g = -1, k;
    for (k = 0; k < m.K; k++) { if (y < base + cur[k]) { g = k; break; } base += cur[k]; }
    if (g < 0) return null;
    var a = this.a, f = this.f, size = this.size, codes = m.codes, acc = base;
    /* blocks allocated at or before e: a prefix of the (sorted) block arrays */
    var lo = 0, hi = this.nb;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (a[mid] <= e) lo = mid + 1; else hi = mid; }
    for (var i = 0; i < lo; i++) {
      if (f[i] > e && codes[i] === g) {
        if (y < acc + size[i]) return {i: i, group: g, y0: acc, y1: acc + size[i]};
        acc += size[i];
      }
    }
    return null;
  };
  Model.prototype.describe = function (i) {
    var p = this.p, t = this.t, a = this.a[i], f = this.f[i];
    var d = {
      block: this.bid[i], size: this.size[i], api: p.names.api[this.api[i]] || '?',
      owner: p.names.own[this.own[i]] || '?', cls: p.names.cls[this.cls[i]] || '?',
      alloc_event: a, alloc_ns: t[a], free_event: f === Infinity ? null : f,
      free_ns: f === Infinity ? null : t[f],
      site: this.site && this.site[i] >= 0 ? p.names.site[this.site[i]] : null
    };
    return d;
  };

  /* ---- the view ------------------------------------------------------------------- */
  function colourOf(mode, name, k) {
    if (mode === 'cls' && CLASS_COLOURS[name]) return CLASS_COLOURS[name];
    return PALETTE[k % PALETTE.length];
  }

  function Timeline(root, p, model) {
    this.root = root; this.p = p; this.model = model;
    this.mainEl = root.querySelector('.pit-tl-main');
    this.miniEl = root.querySelector('.pit-tl-mini');
    this.hoverEl = root.querySelector('.pit-tl-hover');
    this.infoEl = root.querySelector('.pit-tl-info');
    this.modeName = 'cls';
    this.range = p.initial.slice();
    this.busy = false;
    this.lastLod = null;
  }
  Timeline.prototype.timeTicks = function (x0, x1) {
    var vals = [], text = [], n = this.model.n, t = this.model.t, k;
    var lo = t[Math.max(0, Math.min(n - 1, Math.round(x0)))], hi = t[Math.max(0, Math.min(n - 1, Math.round(x1)))];
    for (k = 0; k <= 6; k++) {
      var e = Math.round(x0 + (x1 - x0) * k / 6);
      if (e < 0 || e >= n) continue;
      vals.push(e); text.push(fmtTick(t[e], (hi - lo) / 6));
    }
    return {vals: vals, text: text};
  };
  Timeline.prototype.iterShapes = function (x0, x1) {
    var it = this.p.iters, shapes = [], j, drawn = 0;
    for (j = 0; j + 1 < it.length; j++) {
      if (it[j + 1] < x0 || it[j] > x1) continue;
      if (++drawn > 400) break;
      shapes.push({type: 'rect', xref: 'x', yref: 'paper', x0: it[j] - 0.5, x1: it[j + 1] - 0.5, y0: 0, y1: 1,
                   fillcolor: j % 2 ? 'rgba(0,0,0,0.045)' : 'rgba(0,0,0,0)', line: {width: 0}, layer: 'below'});
      /* a boundary tick above the plot area: never over the data */
      shapes.push({type: 'line', xref: 'x', yref: 'paper', x0: it[j] - 0.5, x1: it[j] - 0.5, y0: 1.0, y1: 1.04,
                   line: {color: '#555', width: 1}});
    }
    return shapes;
  };
  Timeline.prototype.traces = function (x0, x1) {
    var m = this.model.mode(this.modeName), lod = this.model.lod(m, x0, x1, BINS), traces = [], k, j;
    var acc = new Float64Array(lod.x.length), ymax = 0;
    var label = this.p.reserved_view ? ' (reserved)' : '';
    for (k = 0; k < m.K; k++) {
      var y = new Array(lod.x.length), any = false;
      for (j = 0; j < lod.x.length; j++) { acc[j] += lod.g[k][j]; y[j] = acc[j]; if (lod.g[k][j] > 0) any = true; }
      traces.push({x: lod.x, y: y, type: 'scatter', mode: 'lines', line: {shape: 'hv', width: 0.5,
                   color: colourOf(this.modeName, m.names[k], k)}, fill: k === 0 ? 'tozeroy' : 'tonexty',
                   fillcolor: colourOf(this.modeName, m.names[k], k), name: m.names[k] + label,
                   hoverinfo: 'skip', legendgroup: 'g' + k, showlegend: true, visible: true,
                   opacity: any ? 1 : 0.999});
    }
    for (j = 0; j < acc.length; j++) if (acc[j] > ymax) ymax = acc[j];
    var nv = this.p.nvml;
    if (nv.x.length) {
      var nx = [], ny = [];
      for (j = 0; j < nv.x.length; j++) {
        if (nv.x[j] >= x0 - (x1 - x0) && nv.x[j] <= x1 + (x1 - x0)) { nx.push(nv.x[j]); ny.push(nv.y[j]); }
      }
      /* keep the samples just outside the view so the step line crosses it */
      var before = -1, after = -1;
      for (j = 0; j < nv.x.length; j++) { if (nv.x[j] < x0) before = j; else if (after < 0 && nv.x[j] > x1) after = j; }
      if (before >= 0 && nx.indexOf(nv.x[before]) < 0) { nx.unshift(nv.x[before]); ny.unshift(nv.y[before]); }
      if (after >= 0 && nx.indexOf(nv.x[after]) < 0) { nx.push(nv.x[after]); ny.push(nv.y[after]); }
      for (j = 0; j < ny.length; j++) if (nx[j] >= x0 && nx[j] <= x1 && ny[j] > ymax) ymax = ny[j];
      if (before >= 0 && nv.y[before] > ymax) ymax = nv.y[before];
      traces.push({x: nx, y: ny, type: 'scatter', mode: 'lines', line: {shape: 'hv', color: '#111', width: 1.5},
                   name: 'NVML used (reserved + CUDA context)', hoverinfo: 'skip'});
    }
    var rl = this.p.reserved_line;
    if (rl) {
      traces.push({x: [x0, x1], y: [rl.y, rl.y], type: 'scatter', mode: 'lines', hoverinfo: 'skip',
                   line: {color: '#C44E52', width: 1.5, dash: 'dash'}, name: rl.label});
      if (rl.y > ymax) ymax = rl.y;
    }
    traces.push({x: [x0, x1], y: [null, null], xaxis: 'x2', type: 'scatter', mode: 'lines', showlegend: false,
                 hoverinfo: 'skip'});
    this.lastLod = lod;
    return {traces: traces, ymax: ymax, exact: lod.exact, points: lod.x.length};
  };
  Timeline.prototype.layout = function (x0, x1, ymax) {
    var tk = this.timeTicks(x0, x1), yt = byteTicks(Math.max(1, ymax) * 1.06);
    return {
      margin: {l: 70, r: 10, t: 46, b: 40}, height: 420, showlegend: true,
      legend: {orientation: 'h', x: 0, y: -0.16, font: {size: 11}},
      xaxis: {range: [x0, x1], title: {text: 'event index (allocations and frees, in order)', standoff: 4},
              zeroline: false, showgrid: false},
      xaxis2: {overlaying: 'x', side: 'top', matches: 'x', tickvals: tk.vals, ticktext: tk.text,
               tickmode: 'array', showgrid: false, zeroline: false, ticks: 'outside',
               title: {text: 'time since the first allocation', font: {size: 11}, standoff: 2}},
      yaxis: {range: [0, Math.max(1, ymax) * 1.06], title: {text: 'device memory'}, fixedrange: true,
              tickmode: 'array', tickvals: yt.vals, ticktext: yt.text},
      shapes: this.iterShapes(x0, x1).concat(this.hoverShape ? [this.hoverShape] : []),
      dragmode: 'zoom', hovermode: false, uirevision: 'keep'
    };
  };
  Timeline.prototype.draw = function () {
    var self = this, x0 = this.range[0], x1 = this.range[1];
    var tr = this.traces(x0, x1);
    this.ymax = tr.ymax;
    var span = Math.max(1, x1 - x0);
    this.infoEl.textContent = fmtInt(Math.min(this.model.n, span + 1)) + ' of ' + fmtInt(this.model.n) +
      ' events in view \u00b7 ' + (tr.exact ? 'every event drawn' : fmtInt(tr.points) + ' points (each bin keeps its peak)');
    this.root.setAttribute('data-range', Math.round(x0) + ',' + Math.round(x1));
    this.root.setAttribute('data-points', String(tr.points));
    this.busy = true;
    return Plotly.react(this.mainEl, tr.traces, this.layout(x0, x1, tr.ymax),
                        {displaylogo: false, scrollZoom: true, responsive: true,
                         modeBarButtonsToRemove: ['select2d', 'lasso2d', 'autoScale2d', 'toImage']})
      .then(function () { self.busy = false; self.drawWindow(); });
  };
  Timeline.prototype.drawMini = function () {
    var m = this.model.mode(this.modeName), n = this.model.n;
    var lod = this.model.lod(m, 0, n - 1, 600), traces = [], acc = new Float64Array(lod.x.length), k, j;
    for (k = 0; k < m.K; k++) {
      var y = new Array(lod.x.length);
      for (j = 0; j < lod.x.length; j++) { acc[j] += lod.g[k][j]; y[j] = acc[j]; }
      traces.push({x: lod.x, y: y, type: 'scatter', mode: 'lines', line: {shape: 'hv', width: 0},
                   fill: k === 0 ? 'tozeroy' : 'tonexty', fillcolor: colourOf(this.modeName, m.names[k], k),
                   hoverinfo: 'skip', showlegend: false});
    }
    var layout = {margin: {l: 70, r: 10, t: 4, b: 22}, height: 80, showlegend: false,
                  xaxis: {range: [0, n - 1], fixedrange: false, showgrid: false, zeroline: false,
                          tickfont: {size: 9}},
                  yaxis: {fixedrange: true, showticklabels: false, showgrid: false, rangemode: 'tozero'},
                  dragmode: 'zoom', hovermode: false, shapes: [this.windowShape()]};
    return Plotly.react(this.miniEl, traces, layout, {displayModeBar: false, responsive: true});
  };
  Timeline.prototype.windowShape = function () {
    return {type: 'rect', xref: 'x', yref: 'paper', x0: this.range[0], x1: this.range[1], y0: 0, y1: 1,
            line: {color: '#C44E52', width: 1.5}, fillcolor: 'rgba(196,78,82,0.12)'};
  };
  Timeline.prototype.drawWindow = function () {
    if (this.miniEl && this.miniEl.layout) Plotly.relayout(this.miniEl, {shapes: [this.windowShape()]});
  };
  Timeline.prototype.setRange = function (x0, x1) {
    var n = this.model.n;
    if (x1 < x0) { var s = x0; x0 = x1; x1 = s; }
    x0 = Math.max(-0.5, x0); x1 = Math.min(n - 0.5, x1);
    if (x1 - x0 < 4) { var c = (x0 + x1) / 2; x0 = c - 2; x1 = c + 2; }
    this.range = [x0, x1];
    this.hoverShape = null;
    return this.draw();
  };
  Timeline.prototype.steady = function () {
    return this.setRange(this.p.initial[0], this.p.initial[1]);
  };
  Timeline.prototype.hoverAt = function (e, y) {
    var m = this.model.mode(this.modeName), hit = this.model.blockAt(m, e, y);
    if (!hit) return null;
    var d = this.model.describe(hit.i);
    d.y0 = hit.y0; d.y1 = hit.y1; d.event = Math.round(e);
    return d;
  };
  Timeline.prototype.showHover = function (d) {
    if (!d) { this.hoverEl.innerHTML = '<span class="pit-tl-none">no block under the cursor</span>'; return; }
    var life = d.free_event === null ? 'never freed (live at the end of the trace)'
      : fmtNs(d.free_ns - d.alloc_ns) + ' (' + fmtInt(d.free_event - d.alloc_event) + ' events)';
    var rows = [['block', '#' + d.block], ['size', fmtBytes(d.size) + ' (' + fmtInt(d.size) + ' B)'],
                ['API', d.api], ['owner', d.owner], ['lifetime class', d.cls],
                ['allocated', fmtNs(d.alloc_ns) + ' \u00b7 event ' + fmtInt(d.alloc_event)],
                ['freed', d.free_event === null ? 'never' : fmtNs(d.free_ns) + ' \u00b7 event ' + fmtInt(d.free_event)],
                ['lifetime', life], ['call site', d.site || 'not recorded in this trace']];
    this.hoverEl.innerHTML = '<table class="facts pit-tl-readout">' + rows.map(function (r) {
      return '<tr><td>' + esc(r[0]) + '</td><td>' + esc(r[1]) + '</td></tr>';
    }).join('') + '</table>';
    this.hoverEl.setAttribute('data-block', String(d.block));
  };
  Timeline.prototype.pixelToData = function (ev) {
    var fl = this.mainEl._fullLayout;
    if (!fl || !fl.xaxis) return null;
    var rect = this.mainEl.getBoundingClientRect(), sz = fl._size;
    var px = ev.clientX - rect.left - sz.l, py = ev.clientY - rect.top - sz.t;
    if (px < 0 || py < 0 || px > sz.w || py > sz.h) return null;
    return {x: fl.xaxis.p2d(px), y: fl.yaxis.p2d(py)};
  };
  Timeline.prototype.bind = function () {
    var self = this, pending = null;
    this.mainEl.on('plotly_relayout', function (ev) {
      if (self.busy) return;
      var r0 = ev['xaxis.range[0]'], r1 = ev['xaxis.range[1]'];
      if (ev['xaxis.range'] && ev['xaxis.range'].length) { r0 = ev['xaxis.range'][0]; r1 = ev['xaxis.range'][1]; }
      if (ev['xaxis.autorange'] || ev['xaxis2.autorange']) { self.setRange(-0.5, self.model.n - 0.5); return; }
      if (r0 === undefined || r1 === undefined) return;
      self.setRange(+r0, +r1);
    });
    this.miniEl.on('plotly_relayout', function (ev) {
      if (self.miniBusy) return;
      var r0 = ev['xaxis.range[0]'], r1 = ev['xaxis.range[1]'];
      if (r0 === undefined || r1 === undefined) return;
      self.miniBusy = true;
      Plotly.relayout(self.miniEl, {'xaxis.range': [0, self.model.n - 1]}).then(function () {
        self.miniBusy = false;
        self.setRange(+r0, +r1);
      });
    });
    this.mainEl.addEventListener('mousemove', function (ev) {
      if (pending) return;
      pending = window.requestAnimationFrame(function () {
        pending = null;
        var pt = self.pixelToData(ev);
        if (!pt) return;
        var d = self.hoverAt(pt.x, pt.y);
        self.showHover(d);
        var shape = d ? {type: 'line', xref: 'x', yref: 'y', x0: d.event, x1: d.event, y0: d.y0, y1: d.y1,
                         line: {color: '#000', width: 4}} : null;
        if (shape || self.hoverShape) {
          self.hoverShape = shape;
          self.busy = true;
          Plotly.relayout(self.mainEl, {shapes: self.iterShapes(self.range[0], self.range[1]).concat(shape ? [shape] : [])})
            .then(function () { self.busy = false; });
        }
      });
    });
    this.root.querySelectorAll('button[data-mode]').forEach(function (b) {
      b.addEventListener('click', function () {
        self.modeName = b.getAttribute('data-mode');
        self.root.querySelectorAll('button[data-mode]').forEach(function (o) { o.classList.toggle('on', o === b); });
        self.root.setAttribute('data-mode', self.modeName);
        self.drawMini(); self.draw();
      });
    });
    this.root.querySelector('button[data-act="steady"]').addEventListener('click', function () { self.steady(); });
    this.root.querySelector('button[data-act="all"]').addEventListener('click', function () {
      self.setRange(-0.5, self.model.n - 0.5);
    });
  };

  function start(root) {
    var t0 = performance.now();
    var p = JSON.parse(root.querySelector('script.pit-tl-data').textContent);
    var names = Object.keys(p.arrays);
    return Promise.all(names.map(function (k) { return inflate(p.arrays[k]); })).then(function (list) {
      var arrs = {};
      names.forEach(function (k, i) { arrs[k] = list[i]; });
      var model = new Model(p, arrs), tl = new Timeline(root, p, model);
      root.pitTimeline = tl;
      if (p.iters.length < 2) root.querySelector('button[data-act="steady"]').disabled = true;
      return tl.drawMini().then(function () { return tl.draw(); }).then(function () {
        tl.bind();
        root.setAttribute('data-timeline', 'ok');
        root.setAttribute('data-mode', 'cls');
        root.setAttribute('data-ms', String(Math.round(performance.now() - t0)));
        return tl;
      });
    });
  }

  window.pitTimelines = [];
  function startAll() {
    var roots = document.querySelectorAll('.pit-tl'), jobs = [];
    if (typeof Plotly === 'undefined') {
      roots.forEach(function (r) { r.setAttribute('data-timeline', 'no-plotly'); });
      return Promise.resolve();
    }
    roots.forEach(function (r) {
      jobs.push(start(r).then(function (tl) { window.pitTimelines.push(tl); }, function (err) {
        r.setAttribute('data-timeline', 'error');
        r.querySelector('.pit-tl-hover').textContent = 'The timeline could not be drawn: ' + err;
        throw err;
      }));
    });
    return Promise.all(jobs).then(function () {
      document.body.setAttribute('data-timelines', 'ok');
      document.body.setAttribute('data-timelines-ms', String(Math.round(performance.now())));
      document.body.setAttribute('data-timelines-script-start-ms', String(Math.round(SCRIPT_START)));
    });
  }
  window.pitTimelinesReady = new Promise(function (resolve, reject) {
    function go() { startAll().then(resolve, reject); }
    if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', go); else go();
  });
})();
