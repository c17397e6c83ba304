/**
 * The timeline page's script, inlined by render.ts: places every element on the time axis
 * from its `data-a`/`data-b` (ms), redraws the axis and the level and series paths, and
 * handles zoom (wheel, at the pointer), pan (drag), reset (double-click), lane toggles and
 * the hover text. Plain ES2017 as a string: the page has no build step and no network.
 */
export const PAGE_SCRIPT = String.raw`(function () {
  var svg = document.getElementById('plot');
  var tip = document.getElementById('tip');
  var end = Number(svg.dataset.end), labelW = Number(svg.dataset.labelW);
  var v0 = 0, v1 = end;
  var width = function () { return Math.max(200, svg.clientWidth - labelW - 10); };
  var x = function (t) { return labelW + (t - v0) * width() / (v1 - v0); };
  var all = function (sel) { return Array.prototype.slice.call(svg.querySelectorAll(sel)); };
  var clamp = function (v, lo, hi) { return Math.min(hi, Math.max(lo, v)); };

  function path(el) {
    var pts = (el.dataset.p || '').split(' ').filter(Boolean).map(function (p) { var s = p.split(','); return [Number(s[0]), Number(s[1])]; });
    var h = Number(el.dataset.h), y0 = Number(el.dataset.y), d = '';
    if (el.dataset.kind === 'level') {
      var y = function (v) { return y0 + (v ? 0 : h); };
      pts.forEach(function (p, i) { d += (i ? 'H' + x(p[0]).toFixed(1) + 'V' : 'M' + x(p[0]).toFixed(1) + ',') + y(p[1]); });
      if (pts.length) d += 'H' + x(end).toFixed(1);
    } else {
      var max = Number(el.dataset.max);
      pts.forEach(function (p, i) { d += (i ? 'L' : 'M') + x(p[0]).toFixed(1) + ',' + (y0 + h - (p[1] / max) * h).toFixed(1); });
    }
    el.setAttribute('d', d || 'M0,0');
  }

  function axis() {
    var g = document.getElementById('axis'), h = svg.getAttribute('height');
    var span = v1 - v0, p = Math.pow(10, Math.floor(Math.log10(span / 10)));
    var step = [1, 2, 5, 10].map(function (m) { return m * p; }).find(function (s) { return span / s <= 10; });
    var out = '';
    for (var t = Math.ceil(v0 / step) * step; t <= v1; t += step) {
      var px = x(t).toFixed(1);
      out += '<line class="axis-line" x1="' + px + '" x2="' + px + '" y1="16" y2="' + h + '"/><text class="axis-text" x="' + px + '" y="12" text-anchor="middle">+' + (t / 1000).toFixed(step < 1000 ? 2 : 0) + ' s</text>';
    }
    g.innerHTML = out;
  }

  function layout() {
    var right = labelW + width();
    all('[data-a]').forEach(function (el) {
      var a = Number(el.dataset.a), b = el.dataset.b === undefined ? (el.classList.contains('mark') || el.classList.contains('failure') ? a : end) : Number(el.dataset.b);
      var xa = x(a), xb = x(b);
      var visible = xb >= labelW - 2 && xa <= right + 2;
      if (el.tagName === 'g') { el.setAttribute('transform', 'translate(' + (xa - 3) + ',0)'); el.style.display = visible ? '' : 'none'; return; }
      el.style.display = visible ? '' : 'none';
      if (!visible) return;
      var from = Math.max(xa, labelW);
      if (el.tagName === 'text') { el.setAttribute('x', from + 2); el.style.display = xb - from > 8 * el.textContent.length ? '' : 'none'; return; }
      if (el.classList.contains('mark')) { el.setAttribute('x', xa - 1); el.setAttribute('width', 3); return; }
      el.setAttribute('x', from);
      el.setAttribute('width', Math.max(1, Math.min(xb, right) - from));
    });
    all('path[data-p]').forEach(path);
    axis();
  }

  function restack() {
    var y = 24;
    all('g.lane').forEach(function (g) {
      if (g.style.display === 'none') return;
      g.setAttribute('transform', 'translate(0,' + y + ')');
      y += Number(g.dataset.h) + 10;
    });
    svg.setAttribute('height', y + 4);
    all('.failure line, .failure rect').forEach(function (el) { el.setAttribute(el.tagName === 'line' ? 'y2' : 'height', y); });
    layout();
  }

  document.querySelectorAll('[data-toggle]').forEach(function (box) {
    box.addEventListener('change', function () {
      svg.querySelector('g.lane[data-lane="' + box.dataset.toggle + '"]').style.display = box.checked ? '' : 'none';
      restack();
    });
  });

  svg.addEventListener('wheel', function (e) {
    e.preventDefault();
    var r = svg.getBoundingClientRect(), at = v0 + (e.clientX - r.left - labelW) * (v1 - v0) / width();
    var k = e.deltaY > 0 ? 1.25 : 0.8, span = clamp((v1 - v0) * k, 20, end);
    v0 = clamp(at - (at - v0) * span / (v1 - v0), 0, end - span);
    v1 = v0 + span;
    layout();
  }, { passive: false });

  var drag;
  svg.addEventListener('mousedown', function (e) { drag = { x: e.clientX, v0: v0, v1: v1 }; svg.classList.add('dragging'); });
  window.addEventListener('mouseup', function () { drag = undefined; svg.classList.remove('dragging'); });
  window.addEventListener('mousemove', function (e) {
    if (!drag) return;
    var dt = (drag.x - e.clientX) * (drag.v1 - drag.v0) / width();
    var span = drag.v1 - drag.v0;
    v0 = clamp(drag.v0 + dt, 0, end - span);
    v1 = v0 + span;
    layout();
  });
  svg.addEventListener('dblclick', function () { v0 = 0; v1 = end; layout(); });

  svg.addEventListener('mousemove', function (e) {
    var el = e.target.closest ? e.target.closest('[data-text]') : null;
    if (!el || drag) { tip.hidden = true; return; }
    var secs = function (v) { return '+' + (Number(v) / 1000).toFixed(3) + ' s'; };
    tip.textContent = secs(el.dataset.a) + (el.dataset.b !== undefined ? ' to ' + secs(el.dataset.b) : '') + '  ' + el.dataset.text;
    tip.hidden = false;
    tip.style.left = Math.min(e.clientX + 12, window.innerWidth - tip.offsetWidth - 8) + 'px';
    tip.style.top = (e.clientY + 14) + 'px';
  });
  svg.addEventListener('mouseleave', function () { tip.hidden = true; });
  window.addEventListener('resize', layout);
  layout();
})();`;
