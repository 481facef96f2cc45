// headlens attention view: one prompt's tokens; hover or focus a token to shade the keys it
// attends to (opacity = weight, the three largest named with %), click it (or Enter) to pin,
// arrow keys move along the tokens. One head, a layer (head picker) or several layers (layer
// picker). Self-contained: no network; the data is JSON (reports/page/attention_component.py);
// everything is written with textContent, never innerHTML. The report page and a notebook's
// AttentionView both inline this file.
var headlensAttention = (function () {
  "use strict";
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  // A token as shown: its label from the data (attention_component.token_label, the one rule:
  // whitespace as visible glyphs), the raw token only for data written without labels.
  function label(d, k) { return d.labels ? String(d.labels[k]) : String(d.tokens[k]); }
  // base64 -> weights: "f32" little-endian float32 (exact), "u8" weight * 255 rounded (the report's).
  function decode(d) {
    var b = atob(d.att), bytes = new Uint8Array(b.length);
    for (var i = 0; i < b.length; i++) bytes[i] = b.charCodeAt(i);
    if (d.enc === "f32") return new Float32Array(bytes.buffer);
    return bytes;
  }
  function View(root, d, opts) {
    var v = this;
    opts = opts || {};
    v.d = d;
    v.n = d.tokens.length;
    v.att = decode(d);
    v.scale = d.enc === "f32" ? 1 : 1 / 255;
    v.decimals = d.enc === "f32" ? 1 : 0;  // a u8 weight is within 0.2% of the captured one
    v.block = d.tri ? v.n * (v.n + 1) / 2 : v.n * v.n;
    v.li = Math.max(0, d.layers.indexOf(d.layer));
    v.hi = Math.max(0, d.heads.indexOf(d.head));
    v.query = d.query === undefined || d.query === null ? v.n - 1 : d.query;
    v.pinned = false;
    while (root.firstChild) root.removeChild(root.firstChild);
    root.classList.add("hl-av");
    if (opts.pickers !== false && (d.layers.length > 1 || d.heads.length > 1)) {
      var bar = el("div", "hl-av-controls");
      if (d.layers.length > 1) v.layerSel = v.picker(bar, "layer", d.layers, v.li, function (i) { v.li = i; });
      if (d.heads.length > 1) v.headSel = v.picker(bar, "head", d.heads, v.hi, function (i) { v.hi = i; });
      root.appendChild(bar);
    }
    if (d.title) root.appendChild(el("div", "hl-av-title", d.title));
    var toks = el("div", "hl-av-tokens");
    toks.setAttribute("role", "group");
    toks.setAttribute("aria-label", "tokens: hover, focus or click one to see where it attends");
    v.spans = d.tokens.map(function (t, k) {
      var s = el("span", "hl-av-tok", label(d, k));
      s.tabIndex = 0;
      s.setAttribute("role", "button");
      s.dataset.k = String(k);
      s.addEventListener("mouseenter", function () { if (!v.pinned) v.select(k); });
      s.addEventListener("focus", function () { if (!v.pinned) v.select(k); });
      s.addEventListener("click", function () { v.toggle(k); });
      s.addEventListener("keydown", function (ev) {
        if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); v.toggle(k); }
        else if (ev.key === "ArrowRight" && k + 1 < v.n) { ev.preventDefault(); v.spans[k + 1].focus(); }
        else if (ev.key === "ArrowLeft" && k > 0) { ev.preventDefault(); v.spans[k - 1].focus(); }
      });
      toks.appendChild(s);
      return s;
    });
    root.appendChild(toks);
    v.info = el("div", "hl-av-info");
    v.info.setAttribute("aria-live", "polite");
    root.appendChild(v.info);
    v.paint();
  }
  View.prototype.picker = function (bar, name, values, at, set) {
    var v = this, label = el("label", "hl-av-pick", name + " "), sel = el("select");
    sel.setAttribute("data-pick", name);
    values.forEach(function (x, i) { var o = el("option", null, x); o.value = String(i); sel.appendChild(o); });
    sel.value = String(at);
    sel.addEventListener("change", function () { set(+sel.value); v.paint(); });
    label.appendChild(sel);
    bar.appendChild(label);
    return sel;
  };
  View.prototype.weight = function (q, k) {
    var d = this.d;
    if (d.causal && k > q) return 0;
    var at = d.tri ? q * (q + 1) / 2 + k : q * this.n + k;
    return this.att[(this.li * d.heads.length + this.hi) * this.block + at] * this.scale;
  };
  View.prototype.percent = function (w) { return (100 * w).toFixed(this.decimals) + "%"; };
  View.prototype.select = function (q) { this.query = q; this.paint(); };
  View.prototype.toggle = function (q) {
    if (this.pinned && this.query === q) this.pinned = false;
    else { this.pinned = true; this.query = q; }
    this.paint();
  };
  // The report page picks the head from its own table: setHead(layer, head) with model indices.
  View.prototype.setHead = function (layer, head) {
    var li = this.d.layers.indexOf(layer), hi = this.d.heads.indexOf(head);
    if (li < 0 || hi < 0) return false;
    this.li = li; this.hi = hi;
    if (this.layerSel) this.layerSel.value = String(li);
    if (this.headSel) this.headSel.value = String(hi);
    this.paint();
    return true;
  };
  View.prototype.paint = function () {
    var v = this, d = v.d, q = v.query, best = [];
    v.spans.forEach(function (s, k) {
      var later = d.causal && k > q, w = v.weight(q, k);
      s.style.backgroundColor = later ? "transparent" : "rgba(230, 85, 13, " + w.toFixed(3) + ")";
      s.style.color = (!later && w > 0.6) ? "#fff" : "";
      s.classList.toggle("hl-av-query", k === q);
      s.classList.toggle("hl-av-later", later);
      s.setAttribute("aria-pressed", v.pinned && k === q ? "true" : "false");
      s.dataset.w = later ? "" : String(w);
      s.title = later ? "later token (causal: not attended)" : "attention from token " + q + " to token " + k + ": " + v.percent(w);
      if (!later) best.push([w, k]);
    });
    best.sort(function (a, b) { return b[0] - a[0] || a[1] - b[1]; });
    var parts = best.slice(0, 3).map(function (p) { return "\u201c" + label(d, p[1]) + "\u201d (" + p[1] + ") " + v.percent(p[0]); });
    v.info.textContent = "head " + d.layers[v.li] + "." + d.heads[v.hi] + ", query \u201c" + label(d, q) + "\u201d (" + q + ")" +
      (v.pinned ? " [pinned]" : "") + " attends most to: " + parts.join(", ");
  };
  function mount(root, data, opts) { return new View(root, data, opts); }
  // A view written by attention_component.fragment_html: its root element and its JSON data,
  // looked up in scope (the script's parent: found even before a notebook attaches the output).
  function mountId(id, scope) {
    function find(x) { return (scope && scope.querySelector ? scope.querySelector("#" + x) : null) || document.getElementById(x); }
    var root = find(id), src = find(id + "-data");
    if (!root || !src || root.dataset.hlMounted) return null;
    root.dataset.hlMounted = "1";
    return mount(root, JSON.parse(src.textContent));
  }
  return { mount: mount, mountId: mountId };
})();
