/* What PyTorch's memory viewer (pytorch.org/memory_viz, torch/utils/viz/MemoryViz.js) does
 * with a snapshot before and while it draws, re-written for pyinterpose's tests from a reading
 * of that file's behaviour (no code copied).  Three steps matter for whether our export opens:
 *
 * 1. annotate(snapshot): numbers the versions of every address (blocks and segments apart),
 *    renames streams to small integers (null everywhere when all are on stream 0), gives
 *    events without frames an empty list, folds a free_requested immediately followed by the
 *    free_completed of the same address into one "free" event, collects the category of
 *    every event into snapshot.categories (first-seen order), lays the blocks of every final
 *    segment end to end from the segment's address, and finally -- when there are categories
 *    but none is 'unknown' -- calls push on a misspelt property (snapshot.categores), which
 *    throws a TypeError: the viewer stops there.
 * 2. replay(snapshot, device, idx): the segment view's state after event idx, obtained by
 *    walking device_traces backwards from the final segments; every block must then lie
 *    inside a segment (the viewer dereferences the segment it looks up).
 * 3. timeline(snapshot, device, plotSegments): the allocation (or segment) timeline: elements
 *    from alloc (segment_alloc) events, freed by free/free_completed (segment_free), the ones
 *    still live taken from the final segments; each element's colour is the index of its
 *    category (or 'unknown') in snapshot.categories.
 */
(function () {
  'use strict';

  function versions() {
    var seen = {};
    return function (addr, bump) {
      var v = seen[addr] || 0;
      if (bump) seen[addr] = v + 1; else seen[addr] = v;
      return v;
    };
  }

  function annotate(snap) {
    var segVer = versions(), blkVer = versions(), streams = {0: 0}, nextStream = 1;
    function streamOf(s) { if (!(s in streams)) streams[s] = nextStream++; return streams[s]; }
    snap.categories = [];
    var traces = [];
    snap.device_traces.forEach(function (dt) {
      var out = [];
      traces.push(out);
      dt.forEach(function (ev) {
        if (!('frames' in ev)) ev.frames = [];
        ev.stream = streamOf(ev.stream);
        var a = ev.action;
        if (a === 'free_completed') {
          ev.version = blkVer(ev.addr, true);
          var last = out.length ? out[out.length - 1] : null;
          if (last && last.action === 'free_requested' && last.addr === ev.addr) { last.action = 'free'; return; }
        } else if (a === 'free_requested' || a === 'alloc') {
          ev.version = blkVer(ev.addr, false);
        } else if (a === 'segment_free' || a === 'segment_unmap') {
          ev.version = segVer(ev.addr, true);
        } else if (a === 'segment_alloc' || a === 'segment_map') {
          ev.version = segVer(ev.addr, false);
        }
        if ('category' in ev && snap.categories.indexOf(ev.category) < 0) snap.categories.push(ev.category);
        ev.idx = out.length;
        out.push(ev);
      });
    });
    snap.device_traces = traces;
    if (nextStream === 1) traces.forEach(function (dt) { dt.forEach(function (ev) { ev.stream = null; }); });
    snap.segments.forEach(function (seg) {
      seg.stream = streamOf(seg.stream);
      seg.version = segVer(seg.address, false);
      var addr = seg.address;
      seg.blocks.forEach(function (b) {
        b.addr = addr;
        if (!('frames' in b)) { b.frames = []; b.requested_size = b.requested_size || b.size; }
        b.version = blkVer(b.addr, false);
        addr += b.size;
      });
    });
    if (snap.categories.length > 0 && snap.categories.indexOf('unknown') < 0) {
      var missing;  // the viewer's misspelt snapshot.categores
      missing.push('unknown');  // TypeError, as in the viewer
    }
    return snap;
  }

  function replay(snap, device, idx) {
    var segs = [], blocks = {};
    snap.segments.forEach(function (s) {
      if (s.device !== device) return;
      segs.push({addr: s.address, size: s.total_size, stream: s.stream});
      s.blocks.forEach(function (b) {
        if (b.state === 'active_allocated' || b.state === 'active_pending_free') {
          blocks[b.addr] = {addr: b.addr, size: b.size, requested_size: b.requested_size};
        }
      });
    });
    segs.sort(function (x, y) { return x.addr - y.addr; });
    var evs = snap.device_traces[device] || [];
    for (var i = evs.length - 1; i > idx; i--) {
      var e = evs[i];
      switch (e.action) {
        case 'free': case 'free_completed':
          blocks[e.addr] = {addr: e.addr, size: e.size, requested_size: e.size}; break;
        case 'free_requested':
          if (!blocks[e.addr]) throw new TypeError('free_requested of an unknown block ' + e.addr);
          break;
        case 'alloc':
          delete blocks[e.addr]; break;
        case 'segment_free': case 'segment_unmap': {
          var at = segs.findIndex(function (s) { return s.addr > e.addr; });
          if (at < 0) at = segs.length;
          segs.splice(at, 0, {addr: e.addr, size: e.size, stream: e.stream});
          break;
        }
        case 'segment_alloc': case 'segment_map': {
          var k = segs.findIndex(function (s) { return s.addr === e.addr; });
          if (k < 0) throw new TypeError('segment_alloc of an unknown segment ' + e.addr);
          segs.splice(k, 1);
          break;
        }
        default: break;
      }
    }
    var byAddr = segs.slice().sort(function (x, y) { return x.addr - y.addr; });
    function find(addr) {
      var lo = 0, hi = byAddr.length - 1;
      while (lo <= hi) {
        var mid = (lo + hi) >> 1, s = byAddr[mid];
        if (addr < s.addr) hi = mid - 1; else if (addr >= s.addr + s.size) lo = mid + 1; else return s;
      }
      return null;
    }
    var allocated = 0, reserved = 0, list = Object.keys(blocks).map(function (k) { return blocks[k]; });
    list.forEach(function (b) {
      var s = find(b.addr);
      if (s === null) throw new TypeError('block ' + b.addr + ' lies in no segment (the viewer reads s.occupied)');
      allocated += b.requested_size;
    });
    segs.forEach(function (s) { reserved += s.size; });
    return {reserved: reserved, allocated: allocated, segments: segs.length, blocks: list.length};
  }

  function timeline(snap, device, plotSegments) {
    var t = build(snap, device, plotSegments), out = {};
    Object.keys(t).forEach(function (k) { if (k[0] !== '_') out[k] = t[k]; });
    return out;
  }

  function build(snap, device, plotSegments) {
    var elements = [], live = {}, actions = [], initially = [];
    var allocA = plotSegments ? 'segment_alloc' : 'alloc';
    var freeA = plotSegments ? ['segment_free'] : ['free', 'free_completed'];
    (snap.device_traces[device] || []).forEach(function (e) {
      if (e.action === allocA) {
        elements.push(e); live[e.addr] = elements.length - 1; actions.push(elements.length - 1);
      } else if (freeA.indexOf(e.action) >= 0) {
        if (e.addr in live) { actions.push(live[e.addr]); delete live[e.addr]; }
        else { elements.push(e); initially.push(elements.length - 1); actions.push(elements.length - 1); }
      }
    });
    snap.segments.forEach(function (s) {
      if (s.device !== device) return;
      if (plotSegments) {
        if (!(s.address in live)) { elements.push({action: 'alloc', addr: s.address, size: s.total_size}); initially.push(elements.length - 1); }
      } else {
        s.blocks.forEach(function (b) {
          if (b.state === 'active_allocated' && !(b.addr in live)) {
            elements.push({action: 'alloc', addr: b.addr, size: b.requested_size}); initially.push(elements.length - 1);
          }
        });
      }
    });
    /* the viewer's colour: the index of the element's category when the snapshot has categories, else
       the element's own index (every element a colour of its own, modulo the palette of 10) */
    var colours = elements.map(function (el, i) {
      return snap.categories.length > 0 ? snap.categories.indexOf(el.category || 'unknown') : i;
    });
    var used = {}, distinct = {};
    elements.forEach(function (el, i) {
      distinct[colours[i] % 10] = true;
      if (snap.categories.length > 0) used[el.category || 'unknown'] = true;
    });
    var on = {}, total = 0, maxSize = 0;
    initially.forEach(function (i) { on[i] = true; total += elements[i].size; });
    maxSize = total;
    actions.forEach(function (i) {
      if (on[i]) { delete on[i]; total -= elements[i].size; } else { on[i] = true; total += elements[i].size; }
      if (total > maxSize) maxSize = total;
    });
    return {elements: elements.length, max_size: maxSize, min_colour: Math.min.apply(null, colours.concat([0])),
            palette_colours: Object.keys(distinct).length, used_categories: Object.keys(used).sort(),
            legend: snap.categories.slice(), _el: elements, _actions: actions, _initially: initially,
            _colours: colours};
  }

  /* A picture of the timeline() above, for a person to look at (the tests' screenshots): each element a
     band stacked in allocation order (the viewer's order, without its sliding animation), coloured from the
     viewer's ten-colour palette by the same rule, the legend of snapshot.categories above it. */
  var PALETTE = ['#4e79a7', '#f28e2c', '#e15759', '#76b7b2', '#59a14f', '#edc949', '#af7aa1', '#ff9da7',
                 '#9c755f', '#bab0ab'];
  function draw(snap, device, plotSegments, canvas) {
    var tl = build(snap, device, plotSegments), el = tl._el, W = canvas.width, H = canvas.height;
    var ctx = canvas.getContext('2d'), top = 20 + 14 * Math.ceil(snap.categories.length / 6), steps = tl._actions.length + 1;
    ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, W, H);
    var live = tl._initially.slice(), on = {}, k;
    live.forEach(function (i) { on[i] = true; });
    var sx = (W - 60) / steps, sy = (H - top - 10) / Math.max(1, tl.max_size);
    function paint(step) {
      var y = H - 10;
      live.forEach(function (i) {
        var h = el[i].size * sy;
        ctx.fillStyle = PALETTE[((tl._colours[i] % 10) + 10) % 10];
        ctx.fillRect(50 + step * sx, y - h, Math.max(1, sx), h);
        y -= h;
      });
    }
    paint(0);
    tl._actions.forEach(function (i, s) {
      if (on[i]) { delete on[i]; live.splice(live.indexOf(i), 1); } else { on[i] = true; live.push(i); }
      paint(s + 1);
    });
    ctx.font = '11px sans-serif';
    snap.categories.forEach(function (c, j) {
      var x = 50 + (j % 6) * 150, y = 6 + 14 * Math.floor(j / 6);
      ctx.fillStyle = PALETTE[j % 10]; ctx.fillRect(x, y, 10, 10);
      ctx.fillStyle = '#000'; ctx.fillText(c, x + 14, y + 9);
    });
    ctx.fillStyle = '#000';
    ctx.fillText((plotSegments ? 'Active Cached Segment Timeline' : 'Active Memory Timeline') + ': ' + el.length +
                 ' elements, peak ' + (tl.max_size / 1048576).toFixed(1) + ' MiB', 50, H - 0);
    return tl.elements;
  }

  /* what the viewer prints for a call stack (its format_frames, without its frame filter) */
  function formatFrames(frames) {
    if (frames.length === 0) return '<block was allocated before _record_history was enabled>';
    return frames.map(function (f) { return f.filename + ':' + f.line + ':' + f.name; }).join('\n');
  }

  window.memvizViewer = {annotate: annotate, replay: replay, timeline: timeline, formatFrames: formatFrames,
                         draw: draw};
})();
