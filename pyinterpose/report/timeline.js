/* pyinterpose memory timeline (written for pyinterpose; drawn with uPlot).
 *
 * Reads the payload of report/timeline.py from <script class="pit-tl-data">, inflates
 * its typed arrays, and draws: the stacked live bytes (by lifetime class or by owner)
 * at a level of detail that follows the zoom (at most BINS bins across the view; each
 * bin keeps its peak and its last value, so no peak is lost; an exact step curve once
 * the view holds fewer events than that), NVML used memory, the framework allocator's
 * reserve, iteration bands under the data, an event-index axis (bottom) and a time axis
 * (top), a minimap of the whole run, and a readout of the block under the cursor.
 *
 * uPlot (the ``uplot-python`` package's copy, inlined when the report is written) draws
 * the axes, the stacked step areas and the drag-to-zoom selection; this script computes
 * what to draw and adds wheel zoom, shift-drag pan, the minimap's window and the hover.
 */
(function () {
  'use strict';
  var SCRIPT_START = performance.now();
  var BINS = 1200, MINI_BINS = 600, CHECK = 4096, NEVER = 0xFFFFFFFF, HEIGHT = 420, MINI_HEIGHT = 80, YAXIS = 74;
  var PALETTE = ['#4C72B0', '#DD8452', '#55A868', '#C44E52', '#8172B3', '#937860', '#DA8BC3', '#8C8C8C',
                 '#CCB974', '#64B5CD', '#2F4B7C', '#A05195'];
  var CLASS_COLOURS = {persistent: '#4C72B0', leak: '#C44E52', cross_iteration: '#8172B3', per_iteration: '#DD8452',
                       transient: '#55A868', outside: '#BBBBBB', other: '#8C8C8C', live: '#4C72B0',
                       reserved: '#4C72B0', 'min per bucket': '#4C72B0', 'max per bucket': '#A9BEDF'};
  var NVML_COLOUR = '#111111', RESERVED_COLOUR = '#C44E52';

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
  function timeLabels(ns) {
    /* labels for ticks at times ``ns`` (null: no label): one unit for all (the one that fits the
       largest), and the fewest decimals that keep every two ticks at different times apart; a
       tick at the same time as the one before it gets no label of its own */
    var top = 0, i;
    ns.forEach(function (v) { if (v !== null && Math.abs(v) > top) top = Math.abs(v); });
    var u = top >= 1e9 ? [1e9, 's'] : top >= 1e6 ? [1e6, 'ms'] : top >= 1e3 ? [1e3, 'us'] : [1, 'ns'];
    function make(d, any) {
      var out = [], prevT = null, prevS = null, clash = false;
      for (i = 0; i < ns.length; i++) {
        if (ns[i] === null || ns[i] === prevT) { out.push(''); continue; }
        var s = (ns[i] / u[0]).toFixed(d) + ' ' + u[1];
        if (s === prevS) clash = true;
        out.push(s); prevT = ns[i]; prevS = s;
      }
      return clash && !any ? null : out;
    }
    for (var d = 0; d < 9; d++) { var l = make(d, false); if (l) return l; }
    return make(9, true);          /* (9 decimals of a second are nanoseconds: never reached) */
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
  /* ticks of the event axis at whole events only (1, 2, 5 x 10^k apart): a label is never rounded
     onto its neighbour's */
  var INT_INCRS = [], EDGE = 48;   /* EDGE: room (px) right of the plot for the last label's half */
  for (var ie = 0; ie < 12; ie++) [1, 2, 5].forEach(function (m) { INT_INCRS.push(m * Math.pow(10, ie)); });
  function eventValues(u, splits) {
    return splits.map(function (v) { return v < -0.5 || v !== Math.round(v) ? '' : fmtInt(v); });
  }
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
    var acc = 0, bid = new Float64Array(nb), bacc = 0, sizes = arrs.sizes, sidx = arrs.size_idx;
    var la = arrs.a, life = arrs.life, dbid = arrs.bid;
    for (i = 0; i < nb; i++) {
      acc += la[i]; a[i] = acc;
      f[i] = life[i] === NEVER ? Infinity : acc + life[i];
      size[i] = sizes[sidx[i]];
      bacc += dbid[i]; bid[i] = bacc;
    }
    this.a = a; this.f = f; this.size = size; this.bid = bid;
    this.cls = arrs.cls; this.own = arrs.own; this.api = arrs.api; this.site = arrs.site || null;
    var t = new Float64Array(n), tq = p.tq, tt = 0, dt = arrs.t, t0 = p.t0_ns || 0;
    for (i = 0; i < n; i++) { tt += dt[i]; t[i] = t0 + tt * tq; }
    this.t = t;                     // ns since the start of capture (the origin of every time in the report)
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
  Model.prototype.lod = function (m, r0, r1, bins) {
    /* points to draw for the x range [r0, r1] (event indices, fractional at the edges): a
       point at r0 (the state before the first event in view), then per bin the event where
       the total peaks and the bin's last event, or every event when the range is short, and
       a point at r1.  A point's values hold until the next point (a step curve).  Returns
       {x: [...], g: [K][...]} with every group's live bytes after each point's event. */
    var n = this.n, K = m.K;
    var e0 = Math.max(0, Math.ceil(r0)), e1 = Math.min(n - 1, Math.floor(r1));
    var cur = this.stateBefore(m, Math.min(e0, n)), xs = [], gs = [], k, e;
    for (k = 0; k < K; k++) gs.push([]);
    function push(x) { xs.push(x); for (k = 0; k < K; k++) gs[k].push(cur[k]); }
    if (r0 < e0) push(r0);
    var span = e1 - e0 + 1, exact = span <= 2 * bins, evc = m.evc, delta = this.delta;
    if (exact) {
      for (e = e0; e <= e1; e++) { cur[evc[e]] += delta[e]; push(e); }
    } else {
      var tot = 0, w = span / bins, bi, next, peakV, peakE, peakS = new Float64Array(K);
      for (k = 0; k < K; k++) tot += cur[k];
      e = e0;
      for (bi = 0; bi < bins && e <= e1; bi++) {
        next = Math.min(e1 + 1, Math.floor(e0 + (bi + 1) * w));
        if (next <= e) continue;
        peakV = -Infinity; peakE = -1;
        for (; e < next; e++) {
          var c = evc[e], d = delta[e];
          cur[c] += d; tot += d;
          if (tot > peakV) { peakV = tot; peakE = e; for (k = 0; k < K; k++) peakS[k] = cur[k]; }
        }
        if (peakE !== e - 1) { xs.push(peakE); for (k = 0; k < K; k++) gs[k].push(peakS[k]); }
        push(e - 1);
      }
    }
    if (!xs.length || r1 > xs[xs.length - 1]) push(r1);
    return {x: xs, g: gs, exact: exact};
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
    return {
      block: this.bid[i], size: this.size[i], api: p.names.api[this.api[i]] || '?',
      owner: p.names.own[this.own[i]] || '?', cls: p.names.cls[this.cls[i]] || '?',
      alloc_event: a, alloc_ns: t[a], free_event: f === Infinity ? null : f,
      free_ns: f === Infinity ? null : t[f],
      site: this.site && this.site[i] >= 0 ? p.names.site[this.site[i]] : null
    };
  };

  /* ---- the summary of a long run: min/max per bucket at several zoom levels ----------- */
  function inflateDelta(spec) {
    /* a delta-coded array of report/curve_levels.py: its base plus the running sum, as float64 (exact below 2^53) */
    return inflate(spec).then(function (d) {
      var out = new Float64Array(d.length), acc = spec.base || 0;
      for (var i = 0; i < d.length; i++) { acc += d[i]; out[i] = acc; }
      return out;
    });
  }
  function Pyramid(p, root, level0, exact) {
    /* the same interface as Model for what the view asks of it (n, mode, lod); level l has
       p.summary.buckets[l] buckets, bucket j holding the events [floor(j*n/B), floor((j+1)*n/B));
       tiles of p.summary.tile buckets are decoded when the view first needs them */
    this.p = p; this.n = p.events; this.root = root; this.summary = true;
    this.B = p.summary.buckets; this.T = p.summary.tile;
    this.raw = [p.summary.levels[0]];        /* per level: the tiles' packed arrays (parsed on demand) */
    this.tiles = [{0: level0}];               /* per level: tile index -> {lo, hi, t} (decoded) */
    this.loading = {}; this.onload = null; this.maxLevelShown = 0;
    this.exact = exact || [];                 /* stretches stored event by event: {e0, e1, v, t} */
    for (var l = 1; l < this.B.length; l++) { this.raw.push(null); this.tiles.push({}); }
  }
  Pyramid.prototype.mode = function () {
    return {name: 'sum', names: ['min per bucket', 'max per bucket'], K: 2};
  };
  Pyramid.prototype.edge = function (l, j) { return Math.floor(j * this.n / this.B[l]); };
  Pyramid.prototype.bucketOf = function (l, e) {
    /* the bucket of level l holding event e (e in [0, n)) */
    var B = this.B[l], j = Math.floor((e + 1) * B / this.n);
    while (j > 0 && this.edge(l, j) > e) j--;
    while (j + 1 < B && this.edge(l, j + 1) <= e) j++;
    return j;
  };
  Pyramid.prototype.request = function (l, ti) {
    /* decode tile ti of level l (once); the view redraws when it arrives */
    var key = l + ':' + ti, self = this;
    if (this.loading[key] || this.tiles[l][ti]) return;
    if (!this.raw[l]) {
      /* the finer levels sit at the end of the page: not parsed yet, ask again once they are */
      var el = document.querySelector('script.pit-tl-level[data-tl="' + this.root.getAttribute('data-idx') +
                                      '"][data-level="' + l + '"]');
      if (!el || document.readyState === 'loading') {
        this.loading[key] = new Promise(function (res) {
          document.addEventListener('DOMContentLoaded', function () { delete self.loading[key]; self.request(l, ti); res(); });
        });
        return;
      }
      this.raw[l] = JSON.parse(el.textContent);
    }
    var spec = this.raw[l][ti];
    this.loading[key] = Promise.all([inflateDelta(spec.lo), inflateDelta(spec.hi), inflateDelta(spec.t)])
      .then(function (a) {
        self.tiles[l][ti] = {lo: a[0], hi: a[1], t: a[2]};
        delete self.loading[key];
        if (self.onload) self.onload(l, ti);
      });
  };
  Pyramid.prototype.ready = function (l, j0, j1) {
    /* whether buckets j0..j1 of level l are decoded; asks for the missing tiles */
    var ok = true, T = this.T;
    for (var ti = Math.floor(j0 / T); ti <= Math.floor(j1 / T); ti++) {
      if (!this.tiles[l][ti]) { ok = false; this.request(l, ti); }
    }
    return ok;
  };
  Pyramid.prototype.pending = function () { return Object.keys(this.loading).length; };
  Pyramid.prototype.bucket = function (l, j) {
    var tile = this.tiles[l][Math.floor(j / this.T)], k = j % this.T;
    return {lo: tile.lo[k], hi: tile.hi[k], t: this.p.t0_ns + tile.t[k], e0: this.edge(l, j), e1: this.edge(l, j + 1) - 1};
  };
  Pyramid.prototype.want = function (r0, r1, bins) {
    /* the level the view should draw: the coarsest with at least ``bins`` buckets in view (about one
       per pixel), else the finest */
    var span = Math.max(1, r1 - r0), l;
    for (l = 0; l < this.B.length; l++) if (this.B[l] * span / this.n >= bins) return l;
    return this.B.length - 1;
  };
  Pyramid.prototype.exactFor = function (e0, e1) {
    for (var i = 0; i < this.exact.length; i++) {
      var w = this.exact[i];
      if (w.e0 <= e0 && e1 <= w.e1) return w;
    }
    return null;
  };
  Pyramid.prototype.lod = function (m, r0, r1, bins) {
    /* points for [r0, r1]: one per bucket of the level the view wants (or the finest one decoded
       so far: the missing tiles are asked for), at the bucket's first event; g[0] its min, g[1]
       max - min (stacked: the band between them); a point at r1 */
    var n = this.n, e0 = Math.max(0, Math.min(n - 1, Math.ceil(r0))), e1 = Math.max(0, Math.min(n - 1, Math.floor(r1)));
    var want = this.want(r0, r1, bins), l = want, j0, j1, w = this.exactFor(e0, e1);
    if (w && e1 - e0 + 1 <= 2 * bins && this.n > this.B[this.B.length - 1]) {
      /* inside a stretch stored event by event, and short enough: every event (a step per event) */
      var ex = [], v0 = [], v1 = [], tx = [], e;
      for (e = e0; e <= e1; e++) { ex.push(e); v0.push(w.v[e - w.e0]); v1.push(0); tx.push(this.p.t0_ns + w.t[e - w.e0]); }
      if (r1 > e1) { ex.push(r1); v0.push(w.v[e1 - w.e0]); v1.push(0); tx.push(null); }
      return {x: ex, g: [v0, v1], t: tx, exact: true, level: this.B.length - 1, want: want, buckets: e1 - e0 + 1,
              per: 1, window: w};
    }
    for (; l >= 0; l--) {
      j0 = this.bucketOf(l, e0); j1 = this.bucketOf(l, e1);
      if (this.ready(l, j0, j1)) break;
    }
    var xs = [], g0 = [], g1 = [], ts = [], b, j;
    for (j = j0; j <= j1; j++) {
      b = this.bucket(l, j);
      xs.push(b.e0); g0.push(b.lo); g1.push(b.hi - b.lo); ts.push(b.e0 >= r0 ? b.t : null);
    }
    if (r1 > xs[xs.length - 1]) { xs.push(r1); g0.push(b.lo); g1.push(b.hi - b.lo); ts.push(null); }
    if (l > this.maxLevelShown) this.maxLevelShown = l;
    return {x: xs, g: [g0, g1], t: ts, exact: false, level: l, want: want, buckets: j1 - j0 + 1,
            per: n / this.B[l]};
  };
  Pyramid.prototype.bucketAt = function (lod, e) {
    /* the bucket drawn at x = e in the last frame: {level, e0, e1, lo, hi, t} */
    if (!lod || e < -0.5 || e > this.n - 0.5) return null;
    if (lod.window) {
      var we = Math.max(lod.window.e0, Math.min(lod.window.e1, Math.round(e))), wv = lod.window.v[we - lod.window.e0];
      return {level: 'exact', e0: we, e1: we, lo: wv, hi: wv, t: this.p.t0_ns + lod.window.t[we - lod.window.e0],
              t1: we + 1 <= lod.window.e1 ? this.p.t0_ns + lod.window.t[we + 1 - lod.window.e0] : null};
    }
    var l = lod.level, j = this.bucketOf(l, Math.max(0, Math.min(this.n - 1, Math.floor(e + 0.5))));
    if (!this.tiles[l][Math.floor(j / this.T)]) return null;
    var b = this.bucket(l, j);
    b.level = l; b.t1 = j + 1 < this.B[l] ? this.bucket(l, j + 1).t : null;
    return b;
  };

  /* ---- the view ------------------------------------------------------------------- */
  function colourOf(mode, name, k) {
    if ((mode === 'cls' || mode === 'sum') && CLASS_COLOURS[name]) return CLASS_COLOURS[name];
    return PALETTE[k % PALETTE.length];
  }
  function stepped() { return uPlot.paths.stepped({align: 1}); }
  function lastAtOrBefore(xs, x) {
    /* index of the last xs[i] <= x (xs sorted), -1 if none */
    var lo = 0, hi = xs.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (xs[mid] <= x) lo = mid + 1; else hi = mid; }
    return lo - 1;
  }

  function Timeline(root, p, model) {
    this.root = root; this.p = p; this.model = model;
    this.mainEl = root.querySelector('.pit-tl-main');
    this.miniEl = root.querySelector('.pit-tl-mini');
    this.hoverEl = root.querySelector('.pit-tl-hover');
    this.infoEl = root.querySelector('.pit-tl-info');
    this.legendEl = root.querySelector('.pit-tl-legend');
    this.modeName = 'cls';
    this.range = p.initial.slice();
    this.ymax = 1;
    this.u = null; this.mini = null;
    this.lastLod = null;
    this.win = document.createElement('div');
    this.win.className = 'pit-tl-window';
  }
  Timeline.prototype.width = function () {
    return Math.max(320, Math.floor(this.root.getBoundingClientRect().width || 1000));
  };
  Timeline.prototype.lines = function () {
    /* the NVML and reserved step lines: [{name, colour, dash, x: [...], y: [...]}] */
    var out = [], nv = this.p.nvml, rl = this.p.reserved_line;
    if (nv && nv.x.length) out.push({name: 'NVML used (reserved + CUDA context)', colour: NVML_COLOUR, dash: null,
                                     width: 1.5, x: nv.x, y: nv.y});
    if (rl) {
      var rx = rl.x || [-0.5], ry = rl.x ? rl.ys : [rl.y];
      out.push({name: rl.label, colour: RESERVED_COLOUR, dash: [6, 4], width: 1.5, x: rx, y: ry});
    }
    return out;
  };
  Timeline.prototype.frame = function (r0, r1, bins) {
    /* uPlot's aligned data for [r0, r1]: x, the stacked series (cumulative, top group first),
       then one column per line (NVML, reserved), each a step function carried forward */
    var m = this.model.mode(this.modeName), lod = this.model.lod(m, r0, r1, bins), K = m.K, k, j;
    var lines = this.lines(), xs = lod.x.slice(), L = lines.length;
    /* the lines' own change points inside the view join the x axis, unless there are more
       of them than points for the stacks (then each x keeps the line's peak until the next) */
    lines.forEach(function (ln) {
      var q0 = lastAtOrBefore(ln.x, r0) + 1, q1 = lastAtOrBefore(ln.x, r1);
      if (q1 - q0 + 1 > 2 * bins) return;
      for (var q = q0; q <= q1; q++) if (ln.x[q] > r0 && ln.x[q] < r1) xs.push(ln.x[q]);
    });
    if (L) { xs.sort(function (u, v) { return u - v; }); }
    var n = xs.length, cum = [], ymax = 0, src = 0;
    for (k = 0; k < K; k++) cum.push(new Array(n));
    for (j = 0; j < n; j++) {
      while (src + 1 < lod.x.length && lod.x[src + 1] <= xs[j]) src++;
      var acc = 0;
      for (k = 0; k < K; k++) { acc += lod.g[k][src]; cum[k][j] = acc; }
      if (acc > ymax) ymax = acc;
    }
    var data = [xs];
    for (k = K - 1; k >= 0; k--) data.push(cum[k]);
    lines.forEach(function (ln) {
      /* a step line: at each x its value there, or its peak until the next x (level of detail) */
      var col = new Array(n), q = n ? lastAtOrBefore(ln.x, xs[0]) : -1, nx = ln.x.length;
      for (j = 0; j < n; j++) {
        while (q + 1 < nx && ln.x[q + 1] <= xs[j]) q++;
        var v = q < 0 ? null : ln.y[q], end = j + 1 < n ? xs[j + 1] : r1, r = q;
        while (r + 1 < nx && ln.x[r + 1] < end) { r++; if (v === null || ln.y[r] > v) v = ln.y[r]; }
        col[j] = v;
        if (v !== null && v > ymax) ymax = v;
      }
      data.push(col);
    });
    return {data: data, m: m, lod: lod, ymax: ymax, lines: lines};
  };
  Timeline.prototype.seriesFor = function (m, lines, mini) {
    var s = [{}], k, self = this;
    for (k = m.K - 1; k >= 0; k--) {
      var c = colourOf(this.modeName, m.names[k], k);
      s.push({label: m.names[k], stroke: c, fill: c, width: mini ? 0 : 0.5, paths: stepped(),
              points: {show: false}});
    }
    lines.forEach(function (ln) {
      s.push({label: ln.name, stroke: ln.colour, width: ln.width, dash: ln.dash || undefined, paths: stepped(),
              points: {show: false}, spanGaps: false, show: !mini});
    });
    return s;
  };
  Timeline.prototype.timeSplits = function (u) {
    /* summary: the top axis' ticks at bucket edges drawn (their times are known exactly), about
       110 px apart */
    var lod = this.lastLod, out = [], last = -Infinity, px = u.bbox.width / (window.devicePixelRatio || 1);
    if (!lod) return out;
    var gap = 110 * (this.range[1] - this.range[0]) / Math.max(1, px);
    this.tickTimes = {};
    for (var j = 0; j < lod.x.length; j++) {
      var x = lod.x[j];
      if (lod.t[j] === null || x < this.range[0] || x > this.range[1] || x - last < gap) continue;
      out.push(x); this.tickTimes[x] = lod.t[j]; last = x;
    }
    return out;
  };
  Timeline.prototype.timeValues = function (u, splits) {
    var self = this;
    if (this.model.summary) {
      return timeLabels(splits.map(function (e) { var v = self.tickTimes && self.tickTimes[e]; return v === undefined ? null : v; }));
    }
    var t = this.model.t, n = this.model.n;
    return timeLabels(splits.map(function (e) {
      return e < -0.5 || e > n - 0.5 || e !== Math.round(e) ? null : t[Math.max(0, Math.min(n - 1, e))];
    }));
  };
  Timeline.prototype.makeMain = function (fr) {
    var self = this, model = this.model;
    var opts = {
      width: this.width(), height: HEIGHT, legend: {show: false}, padding: [null, EDGE, null, null],
      scales: {x: {time: false, range: function () { return [self.range[0], self.range[1]]; }},
               y: {range: function () { return [0, Math.max(1, self.ymax) * 1.06]; }}},
      axes: [
        {scale: 'x', side: 2, label: 'event index (allocations and frees, in order)', labelSize: 20,
         grid: {show: false}, space: 70, incrs: INT_INCRS, values: eventValues},
        {scale: 'x', side: 0, label: 'time since the start of capture', labelSize: 20, grid: {show: false},
         space: 110, ticks: {size: 4}, incrs: INT_INCRS,
         splits: model.summary ? function (u) { return self.timeSplits(u); } : undefined,
         values: function (u, splits) { return self.timeValues(u, splits); }},
        {scale: 'y', side: 3, size: YAXIS, label: 'device memory', labelSize: 18,
         splits: function () { return byteTicks(Math.max(1, self.ymax) * 1.06).vals; },
         values: function (u, splits) { var bt = byteTicks(Math.max(1, self.ymax) * 1.06);
           return splits.map(function (v) { var i = bt.vals.indexOf(v); return i < 0 ? '' : bt.text[i]; }); }}
      ],
      series: this.seriesFor(fr.m, fr.lines, false),
      cursor: {drag: {x: true, y: false, setScale: false}, points: {show: false}, y: false},
      hooks: {
        drawClear: [function (u) { self.drawBands(u); }],
        draw: [function (u) { self.drawTicks(u); }],
        setSelect: [function (u) {
          var sel = u.select;
          if (sel.width < 3) return;
          var a = u.posToVal(sel.left, 'x'), b = u.posToVal(sel.left + sel.width, 'x');
          u.setSelect({left: 0, top: 0, width: 0, height: 0}, false);
          self.setRange(a, b);
        }]
      }
    };
    return new uPlot(opts, fr.data, this.mainEl);
  };
  Timeline.prototype.itersInView = function () {
    /* how many iteration boundaries fall inside the view */
    var it = this.p.iters;
    return lastAtOrBefore(it, this.range[1] + 0.5) - lastAtOrBefore(it, this.range[0] + 0.5);
  };
  Timeline.prototype.itersShown = function (u) {
    /* bands and ticks only while each iteration is at least 4 pixels wide: denser, they would
       be a solid bar (zoom in to see them) */
    return this.itersInView() <= u.bbox.width / (window.devicePixelRatio || 1) / 4;
  };
  Timeline.prototype.drawBands = function (u) {
    /* alternate iterations as shaded bands, under the data */
    if (!this.itersShown(u)) return;
    var it = this.p.iters, ctx = u.ctx, x0 = this.range[0], x1 = this.range[1], j, drawn = 0;
    var top = u.bbox.top, h = u.bbox.height, left = u.bbox.left, right = left + u.bbox.width;
    ctx.save();
    ctx.fillStyle = 'rgba(0,0,0,0.05)';
    for (j = 1; j + 1 < it.length; j += 2) {
      if (it[j + 1] < x0 || it[j] > x1) continue;
      if (++drawn > 2000) break;
      var a = Math.max(left, u.valToPos(it[j] - 0.5, 'x', true)), b = Math.min(right, u.valToPos(it[j + 1] - 0.5, 'x', true));
      if (b > a) ctx.fillRect(a, top, Math.max(1, b - a), h);
    }
    ctx.restore();
  };
  Timeline.prototype.drawTicks = function (u) {
    /* a boundary tick just above the plot area for each iteration: never over the data */
    if (!this.itersShown(u)) return;
    var it = this.p.iters, ctx = u.ctx, x0 = this.range[0], x1 = this.range[1], j, drawn = 0;
    var top = u.bbox.top, pr = window.devicePixelRatio || 1;
    ctx.save();
    ctx.strokeStyle = '#B45309'; ctx.lineWidth = 2 * pr;
    ctx.beginPath();
    for (j = 0; j < it.length; j++) {
      if (it[j] - 0.5 < x0 || it[j] - 0.5 > x1) continue;
      if (++drawn > 4000) break;
      var x = Math.round(u.valToPos(it[j] - 0.5, 'x', true)) + 0.5;
      ctx.moveTo(x, top - 9 * pr); ctx.lineTo(x, top - 1);
    }
    ctx.stroke();
    ctx.restore();
  };
  Timeline.prototype.legend = function (m, lines) {
    var items = [], k;
    for (k = 0; k < m.K; k++) {
      var c = colourOf(this.modeName, m.names[k], k);
      items.push('<span class="pit-tl-key"><i style="background:' + c + '"></i>' + esc(m.names[k]) +
                 (this.p.reserved_view ? ' (reserved)' : '') + '</span>');
    }
    lines.forEach(function (ln) {
      items.push('<span class="pit-tl-key"><i class="line' + (ln.dash ? ' dash' : '') + '" style="border-color:' +
                 ln.colour + '"></i>' + esc(ln.name) + '</span>');
    });
    if (this.p.iters.length >= 2) {
      items.push('<span class="pit-tl-key"><i class="band"></i>alternate iterations</span>');
      items.push('<span class="pit-tl-key"><i class="tick"></i>iteration boundary (above the plot)</span>');
    }
    this.legendEl.innerHTML = items.join('');
  };
  Timeline.prototype.draw = function () {
    var x0 = this.range[0], x1 = this.range[1];
    var fr = this.frame(x0, x1, BINS);
    this.ymax = fr.ymax;
    this.lastLod = fr.lod;
    this.frameData = fr.data;
    this.stackSeries = fr.m.K;
    var span = Math.max(1, x1 - x0);
    var nit = this.itersInView(), dense = this.u ? !this.itersShown(this.u) : nit > 250;
    var how = fr.lod.exact ? 'every event drawn' : fmtInt(fr.lod.x.length) + ' points (each bin keeps its peak)';
    if (this.model.summary && fr.lod.window) {
      how = 'every event drawn (events ' + fmtInt(fr.lod.window.e0) + '\u2013' + fmtInt(fr.lod.window.e1) +
        ' are stored one by one)';
      this.root.setAttribute('data-level', String(fr.lod.level));
      this.root.setAttribute('data-want', String(fr.lod.want));
      this.root.setAttribute('data-exact', '1');
    } else if (this.model.summary) {
      this.root.setAttribute('data-exact', '0');
      how = 'level ' + fr.lod.level + ' of ' + (this.model.B.length - 1) + ': ' + fmtInt(fr.lod.buckets) +
        ' buckets of ' + (fr.lod.per < 10 ? fr.lod.per.toFixed(1) : fmtInt(fr.lod.per)) + ' events (min and max each)' +
        (fr.lod.level < fr.lod.want ? ', loading level ' + fr.lod.want + '\u2026' :
         fr.lod.level === this.model.B.length - 1 && fr.lod.buckets < BINS ? ', the finest level stored' : '');
      this.root.setAttribute('data-level', String(fr.lod.level));
      this.root.setAttribute('data-want', String(fr.lod.want));
    }
    this.infoEl.textContent = fmtInt(Math.min(this.model.n, span + 1)) + ' of ' + fmtInt(this.model.n) +
      ' events in view \u00b7 ' + how + (this.p.iters.length >= 2 ? ' \u00b7 ' + fmtInt(Math.max(0, nit)) +
      ' iteration boundaries in view' + (dense ? ' (too dense to mark: zoom in)' : '') : '');
    this.root.setAttribute('data-range', Math.round(x0) + ',' + Math.round(x1));
    this.root.setAttribute('data-points', String(fr.lod.x.length));
    this.hideHover();
    if (!this.u || this.u.series.length !== fr.data.length || this.uMode !== this.modeName) {
      if (this.u) this.u.destroy();
      this.u = this.makeMain(fr);
      this.uMode = this.modeName;
      this.bindMain();
      this.legend(fr.m, fr.lines);
    } else {
      this.u.setData(fr.data);
    }
    this.drawWindow();
  };
  Timeline.prototype.drawMini = function () {
    var self = this, n = this.model.n;
    var fr = this.frame(-0.5, n - 0.5, MINI_BINS);
    var ymax = fr.ymax;
    var opts = {
      width: this.width(), height: MINI_HEIGHT, legend: {show: false}, padding: [null, EDGE, null, null],
      scales: {x: {time: false, range: function () { return [-0.5, n - 0.5]; }},
               y: {range: function () { return [0, Math.max(1, ymax) * 1.04]; }}},
      axes: [{scale: 'x', side: 2, size: 22, grid: {show: false}, font: '9px sans-serif', ticks: {size: 4},
              incrs: INT_INCRS, values: eventValues},
             {scale: 'y', side: 3, size: YAXIS, grid: {show: false}, ticks: {show: false},
              values: function (u, splits) { return splits.map(function () { return ''; }); }}],
      series: this.seriesFor(fr.m, [], true).concat(fr.lines.map(function () { return {show: false}; })),
      cursor: {drag: {x: true, y: false, setScale: false}, points: {show: false}, y: false, x: false},
      /* the window once the minimap is laid out (before its first draw its scale maps nothing) */
      hooks: {draw: [function () { self.drawWindow(); }], setSelect: [function (u) {
        var sel = u.select;
        if (sel.width < 3) return;
        var a = u.posToVal(sel.left, 'x'), b = u.posToVal(sel.left + sel.width, 'x');
        u.setSelect({left: 0, top: 0, width: 0, height: 0}, false);
        self.setRange(a, b);
      }]}
    };
    if (this.mini) this.mini.destroy();
    this.mini = new uPlot(opts, fr.data, this.miniEl);
    this.miniMode = this.modeName;
    this.drawWindow();
  };
  Timeline.prototype.drawWindow = function () {
    /* the red window in the minimap: where the main view is */
    var mu = this.mini;
    if (!mu) return;
    if (this.win.parentNode !== mu.over) mu.over.appendChild(this.win);
    var a = mu.valToPos(this.range[0], 'x'), b = mu.valToPos(this.range[1], 'x');
    this.win.style.left = Math.max(0, a) + 'px';
    this.win.style.width = Math.max(2, Math.min(mu.bbox.width / (window.devicePixelRatio || 1), b) - Math.max(0, a)) + 'px';
  };
  Timeline.prototype.setRange = function (x0, x1) {
    var n = this.model.n;
    if (x1 < x0) { var s = x0; x0 = x1; x1 = s; }
    x0 = Math.max(-0.5, x0); x1 = Math.min(n - 0.5, x1);
    if (x1 - x0 < 4) { var c = (x0 + x1) / 2; x0 = c - 2; x1 = c + 2; }
    this.range = [x0, x1];
    this.draw();
    return Promise.resolve();
  };
  Timeline.prototype.steady = function () {
    var r = this.p.steady || this.p.initial;
    return this.setRange(r[0], r[1]);
  };
  Timeline.prototype.stackTop = function () {
    /* the highest value the drawn stack reaches (the test's view of the drawing) */
    var d = this.frameData, m = 0;
    if (!d || this.stackSeries < 1) return 0;
    d[1].forEach(function (v) { if (v > m) m = v; });
    return m;
  };
  Timeline.prototype.hoverAt = function (e, y) {
    if (this.model.summary) {
      var bk = this.model.bucketAt(this.lastLod, e);
      if (!bk || y < 0 || y > bk.hi * 1.02 + 1) return null;
      bk.bucket = true;
      return bk;
    }
    var m = this.model.mode(this.modeName), hit = this.model.blockAt(m, e, y);
    if (!hit) return null;
    var d = this.model.describe(hit.i);
    d.y0 = hit.y0; d.y1 = hit.y1; d.event = Math.round(e);
    return d;
  };
  Timeline.prototype.hideHover = function () {
    if (this.mark) { this.mark.style.display = 'none'; this.life.style.display = 'none'; }
  };
  Timeline.prototype.showHover = function (d) {
    if (d && d.bucket) {
      var rowsB = [['events', d.level === 'exact' ? 'event ' + fmtInt(d.e0) + ' (stored exactly)' :
                    fmtInt(d.e0) + ' \u2013 ' + fmtInt(d.e1) + ' (' + fmtInt(d.e1 - d.e0 + 1) + ', level ' + d.level + ')'],
                   ['from', fmtNs(d.t) + (d.t1 === null ? '' : ' to ' + fmtNs(d.t1))],
                   ['live bytes, least', fmtBytes(d.lo) + ' (' + fmtInt(d.lo) + ' B)'],
                   ['live bytes, most', fmtBytes(d.hi) + ' (' + fmtInt(d.hi) + ' B)']];
      this.hoverEl.innerHTML = '<table class="facts pit-tl-readout">' + rowsB.map(function (r) {
        return '<tr><td>' + esc(r[0]) + '</td><td>' + esc(r[1]) + '</td></tr>';
      }).join('') + '</table>';
      this.hoverEl.setAttribute('data-bucket', d.level + ':' + d.e0 + ':' + d.e1 + ':' + d.lo + ':' + d.hi);
      this.hoverEl.removeAttribute('data-block');
      this.hideHover();
      return;
    }
    if (!d) {
      this.hoverEl.innerHTML = '<span class="pit-tl-none">no block under the cursor</span>';
      this.hoverEl.removeAttribute('data-block');
      this.hideHover();
      return;
    }
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
    /* mark the block: a bar over its height at the event under the cursor, and its lifetime
       (allocation to free) as a strip along the bottom of the plot */
    var u = this.u;
    if (!this.mark) {
      this.mark = document.createElement('div'); this.mark.className = 'pit-tl-mark';
      this.life = document.createElement('div'); this.life.className = 'pit-tl-life';
    }
    if (this.mark.parentNode !== u.over) { u.over.appendChild(this.mark); u.over.appendChild(this.life); }
    var xe = u.valToPos(d.event, 'x'), ya = u.valToPos(d.y1, 'y'), yb = u.valToPos(d.y0, 'y');
    var h = Math.max(4, yb - ya);
    this.mark.style.display = 'block';
    this.mark.style.left = (xe - 3) + 'px';
    this.mark.style.top = ((ya + yb) / 2 - h / 2) + 'px';
    this.mark.style.height = h + 'px';
    var w = u.over.getBoundingClientRect().width;
    var xa = Math.max(0, u.valToPos(d.alloc_event, 'x'));
    var xb = Math.min(w, u.valToPos(d.free_event === null ? this.model.n - 0.5 : d.free_event, 'x'));
    this.life.style.display = 'block';
    this.life.style.left = xa + 'px';
    this.life.style.width = Math.max(2, xb - xa) + 'px';
  };
  Timeline.prototype.bindMain = function () {
    var self = this, u = this.u, over = u.over, pending = null, panning = null;
    over.addEventListener('mousemove', function (ev) {
      if (panning || pending) return;
      pending = window.requestAnimationFrame(function () {
        pending = null;
        var r = over.getBoundingClientRect(), px = ev.clientX - r.left, py = ev.clientY - r.top;
        if (px < 0 || py < 0 || px > r.width || py > r.height) return;
        self.showHover(self.hoverAt(u.posToVal(px, 'x'), u.posToVal(py, 'y')));
      });
    });
    over.addEventListener('mouseleave', function () { self.hideHover(); });
    over.addEventListener('wheel', function (ev) {
      /* wheel: zoom around the cursor; shift+wheel or a sideways wheel: pan */
      ev.preventDefault();
      var r = over.getBoundingClientRect(), at = u.posToVal(ev.clientX - r.left, 'x');
      var x0 = self.range[0], x1 = self.range[1], span = x1 - x0;
      if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {
        var d = (ev.shiftKey ? ev.deltaY || ev.deltaX : ev.deltaX) / Math.max(1, r.width) * span;
        var n = self.model.n;
        d = Math.max(-0.5 - x0, Math.min(n - 0.5 - x1, d));
        self.setRange(x0 + d, x1 + d);
        return;
      }
      var f = Math.pow(1.0015, ev.deltaY);
      self.setRange(at - (at - x0) * f, at + (x1 - at) * f);
    }, {passive: false});
    /* shift+drag: pan (plain drag selects a range to zoom into) */
    over.addEventListener('mousedown', function (ev) {
      if (!ev.shiftKey || ev.button !== 0) return;
      ev.stopPropagation(); ev.preventDefault();
      panning = {x: ev.clientX, r: self.range.slice(), w: over.getBoundingClientRect().width};
      function move(e2) {
        var span = panning.r[1] - panning.r[0], d = -(e2.clientX - panning.x) / panning.w * span, n = self.model.n;
        d = Math.max(-0.5 - panning.r[0], Math.min(n - 0.5 - panning.r[1], d));
        self.setRange(panning.r[0] + d, panning.r[1] + d);
      }
      function up() { panning = null; window.removeEventListener('mousemove', move); window.removeEventListener('mouseup', up); }
      window.addEventListener('mousemove', move);
      window.addEventListener('mouseup', up);
    }, true);
  };
  Timeline.prototype.bindMini = function () {
    /* drag the window to move the view; drag elsewhere in the minimap to choose a range */
    var self = this;
    this.win.addEventListener('mousedown', function (ev) {
      if (ev.button !== 0 || !self.mini) return;
      ev.stopPropagation(); ev.preventDefault();
      var x = ev.clientX, r = self.range.slice(), scale = self.model.n / Math.max(1, self.mini.over.getBoundingClientRect().width);
      function move(e2) {
        var d = (e2.clientX - x) * scale, n = self.model.n;
        d = Math.max(-0.5 - r[0], Math.min(n - 0.5 - r[1], d));
        self.setRange(r[0] + d, r[1] + d);
      }
      function up() { window.removeEventListener('mousemove', move); window.removeEventListener('mouseup', up); }
      window.addEventListener('mousemove', move);
      window.addEventListener('mouseup', up);
    });
  };
  Timeline.prototype.bind = function () {
    var self = this;
    this.bindMini();
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
    var last = this.width();
    window.addEventListener('resize', function () {
      var w = self.width();
      if (w === last) return;
      last = w;
      if (self.u) self.u.setSize({width: w, height: HEIGHT});
      if (self.mini) self.mini.setSize({width: w, height: MINI_HEIGHT});
      self.drawWindow();
    });
  };

  function start(root) {
    /* phases (ms, for scripts/bench_report.py): parse the JSON, inflate the arrays, build the
       model, draw the main view, draw the minimap */
    var t0 = performance.now(), ph = {}, tp = t0;
    function lap(name) { var t = performance.now(); ph[name] = Math.round(t - tp); tp = t; }
    var p = JSON.parse(root.querySelector('script.pit-tl-data').textContent);
    lap('json');
    var names = p.summary ? [] : Object.keys(p.arrays), jobs;
    if (p.summary) {
      /* a long run: level 0 of the curve's summary and the iteration boundaries */
      var l0 = p.summary.levels[0][0];
      jobs = [inflateDelta(l0.lo), inflateDelta(l0.hi), inflateDelta(l0.t),
              Promise.resolve([]),   /* the iteration boundaries: decoded after the first view (below) */
              Promise.all((p.summary.exact || []).map(function (w) {
                return Promise.all([inflateDelta(w.v), inflateDelta(w.t)]).then(function (a) {
                  return {e0: w.e0, e1: w.e1, v: a[0], t: a[1]};
                });
              }))];
    } else {
      jobs = names.map(function (k) { return inflate(p.arrays[k]); });
    }
    return Promise.all(jobs).then(function (list) {
      lap('inflate');
      var arrs = {}, model, tl;
      if (p.summary) {
        p.iters = list[3];
        model = new Pyramid(p, root, {lo: list[0], hi: list[1], t: list[2]}, list[4]);
        tl = new Timeline(root, p, model);
        model.onload = function () { if (!model.pending()) tl.draw(); };
        root.querySelectorAll('button[data-mode]').forEach(function (b) { b.parentNode.style.display = 'none'; });
        root.setAttribute('data-summary', String(model.B.length));
        tl.modeName = 'sum';
        root.querySelector('.pit-tl-hover').textContent = 'Hover over the curve to read the bucket under the cursor:' +
          ' its events, its time and the least and most bytes live during it.';
      } else {
        names.forEach(function (k, i) { arrs[k] = list[i]; });
        model = new Model(p, arrs); tl = new Timeline(root, p, model);
        model.mode('cls');
      }
      lap('model');
      root.pitTimeline = tl;
      if (p.summary ? !p.steady : p.iters.length < 2) root.querySelector('button[data-act="steady"]').disabled = true;
      tl.draw();
      lap('main');
      tl.drawMini();
      tl.bind();
      lap('minimap');
      if (p.summary && p.iters_packed) {
        /* a long run's iteration boundaries (hundreds of thousands): decoded once the first view is
           drawn (zoomed out that far they are too dense to mark anyway), then marked */
        root.setAttribute('data-iters', 'pending');
        inflateDelta(p.iters_packed).then(function (it) {
          p.iters = it;
          tl.draw();
          tl.legend(model.mode(), tl.lines());
          root.setAttribute('data-iters', 'ok');
        });
      }
      root.setAttribute('data-timeline', 'ok');
      root.setAttribute('data-mode', tl.modeName);
      root.setAttribute('data-ms', String(Math.round(performance.now() - t0)));
      root.setAttribute('data-phases', JSON.stringify(ph));
      return tl;
    });
  }

  window.pitTimelines = [];
  function startAll() {
    var roots = document.querySelectorAll('.pit-tl'), jobs = [];
    if (typeof uPlot === 'undefined') {
      roots.forEach(function (r) { r.setAttribute('data-timeline', 'no-chart-library'); });
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
      /* uPlot draws on a microtask: wait for the frame that shows it */
      return new Promise(function (res) { requestAnimationFrame(function () { res(); }); });
    }).then(function () {
      document.body.setAttribute('data-timelines', 'ok');
      document.body.setAttribute('data-timelines-ms', String(Math.round(performance.now())));
      document.body.setAttribute('data-timelines-script-start-ms', String(Math.round(SCRIPT_START)));
    });
  }
  window.pitTimelinesReady = new Promise(function (resolve, reject) {
    /* the page places this script after every timeline (only a summarised timeline's finer levels
       follow it): start at once, the first view needs nothing the parser has not reached yet */
    startAll().then(resolve, reject);
  });
})();
