// headlens report.html: the page's script, inlined at render time after the attention view's
// (static/attention_view.js) and allowed, with it, by its SHA-256 in the Content-Security-Policy.
// It reads #hl-data and writes with textContent only.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("hl-data").textContent);
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function num(x, d) { return (x === null || x === undefined) ? "n/a" : Number(x).toFixed(d === undefined ? 3 : d); }
  function signed(x, d) { if (x === null || x === undefined) return "n/a"; var s = Number(x).toFixed(d === undefined ? 3 : d); return Number(x) >= 0 ? "+" + s : s; }
  function pct(x) { return (x === null || x === undefined) ? "n/a" : (100 * x).toFixed(1) + "%"; }
  function table(head, rows) {
    var t = el("table"), tr = el("tr");
    head.forEach(function (h) { tr.appendChild(el("th", null, h)); });
    var th = el("thead"); th.appendChild(tr); t.appendChild(th);
    var tb = el("tbody");
    rows.forEach(function (r) {
      var row = el("tr");
      r.forEach(function (c, i) { row.appendChild(el("td", i > 0 ? "num" : null, c)); });
      tb.appendChild(row);
    });
    t.appendChild(tb);
    return t;
  }
  // Each example prompt is one attention view (static/attention_view.js, inlined before this
  // script), built once: choosing another head repaints it and keeps the pinned token.
  var examples = D.examples.map(function (e, i) {
    var wrap = el("div", "example"), root = el("div");
    wrap.appendChild(el("div", "ex-prompt", "Prompt " + (i + 1) + (e.truncated ? " (cut)" : "") + ": " + e.prompt));
    wrap.appendChild(root);
    return { wrap: wrap, view: headlensAttention.mount(root, e.view, { pickers: false }) };
  });
  var state = { head: null };
  function renderDetail(name) {
    var h = D.heads[name];
    var title = document.getElementById("detail-title");
    var body = document.getElementById("detail-body");
    title.textContent = "Head " + name;
    while (body.firstChild) body.removeChild(body.firstChild);
    if (!h) { body.appendChild(el("p", "none", "No such head.")); return; }
    var roles = el("p");
    roles.appendChild(el("span", null, "roles: "));
    if (h.roles.length) h.roles.forEach(function (r) { roles.appendChild(el("span", "badge", r)); });
    else roles.appendChild(el("span", "none", "none"));
    body.appendChild(roles);
    body.appendChild(el("h4", null, "Scores (95% bootstrap interval over prompts)"));
    if (h.scores) {
      body.appendChild(table(["detector", "score", "95% CI", "uniform", "role at", "n"], h.scores.map(function (s) {
        return [s[0] + (s[6] !== null ? " (acc. " + num(s[6], 2) + ")" : ""), num(s[1]), "[" + num(s[2]) + ", " + num(s[3]) + "]", num(s[4]), s[7] === null || s[7] === undefined ? "n/a" : "\u2265 " + s[7], String(s[5])];
      })));
    } else body.appendChild(el("p", "none", D.failed.census ? "census FAILED: " + D.failed.census : "no census scores"));
    body.appendChild(el("h4", null, D.ablation_title || "Ablation of this head alone"));
    var ab = [];
    [["zero", h.zero], ["mean", h.mean]].forEach(function (p) {
      if (p[1]) ab.push([p[0], signed(p[1][0], 4), "[" + signed(p[1][1], 4) + ", " + signed(p[1][2], 4) + "]", num(p[1][3], 4), String(p[1][4])]);
    });
    if (ab.length) body.appendChild(table(["method", "\u0394", "95% CI", "ablated value", "items"], ab));
    else body.appendChild(el("p", "none", "no ablation results"));
    if (h.sink) {
      body.appendChild(el("h4", null, D.sinks_title));
      body.appendChild(table(["setting", "alpha", "sd", "sink rate", "uniform"], h.sink.map(function (s) {
        return [s[0] ? "with BOS" : "no BOS", num(s[1]), num(s[2]), num(s[3]), num(s[4])];
      })));
    }
    if (h.importance !== undefined || h.pruned_at !== undefined) {
      body.appendChild(el("p", null, "pruning importance " + num(h.importance) + (h.pruned_at !== undefined ? "; removed when " + pct(h.pruned_at) + " of heads are pruned" : "")));
    }
    body.appendChild(el("h4", null, "Attention on example prompts (hover a token to see where it attends; click to pin)"));
    var box = el("div");
    body.appendChild(box);
    if (examples.length) {
      var lh = name.split(".");
      examples.forEach(function (e) { e.view.setHead(+lh[0], +lh[1]); box.appendChild(e.wrap); });
    }
    else box.appendChild(el("p", "none", D.failed.examples ? "examples FAILED: " + D.failed.examples : "no example prompts"));
  }
  function select(name, scroll) {
    if (!D.heads[name]) return;
    state.head = name;
    document.querySelectorAll("#role-table tbody tr").forEach(function (tr) { tr.classList.toggle("selected", tr.dataset.head === name); });
    document.querySelectorAll("td.cell").forEach(function (td) { td.classList.toggle("sel", td.dataset.head === name); });
    renderDetail(name);
    if (scroll) document.getElementById("head-detail").scrollIntoView({ block: "nearest" });
  }
  var tbody = document.querySelector("#role-table tbody");
  tbody.addEventListener("click", function (ev) { var tr = ev.target.closest("tr"); if (tr) select(tr.dataset.head, false); });
  tbody.addEventListener("keydown", function (ev) { if (ev.key === "Enter" || ev.key === " ") { var tr = ev.target.closest("tr"); if (tr) { ev.preventDefault(); select(tr.dataset.head, false); } } });
  document.querySelectorAll("td.cell").forEach(function (td) { td.addEventListener("click", function () { select(td.dataset.head, true); }); });
  document.querySelectorAll("#role-table thead th").forEach(function (th) {
    th.addEventListener("click", function () {
      var col = +th.dataset.col, isNum = th.dataset.type === "num";
      var dir = th.getAttribute("aria-sort") === "descending" ? 1 : (th.getAttribute("aria-sort") === "ascending" ? -1 : (isNum && col > 1 ? -1 : 1));
      document.querySelectorAll("#role-table thead th").forEach(function (o) { o.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
      var rows = Array.prototype.slice.call(tbody.rows);
      rows.sort(function (a, b) {
        var x = a.cells[col].dataset.v, y = b.cells[col].dataset.v;
        if (isNum) {
          var fx = x === "" ? NaN : parseFloat(x), fy = y === "" ? NaN : parseFloat(y);
          if (isNaN(fx) && isNaN(fy)) return 0;
          if (isNaN(fx)) return 1;
          if (isNaN(fy)) return -1;
          return dir * (fx - fy);
        }
        return dir * (x < y ? -1 : x > y ? 1 : 0);
      });
      rows.forEach(function (r) { tbody.appendChild(r); });
    });
  });
  var roleSel = document.getElementById("role-filter"), search = document.getElementById("head-search"), count = document.getElementById("row-count");
  function filter() {
    var role = roleSel.value, q = search.value.trim().toLowerCase(), shown = 0, rows = tbody.rows;
    for (var i = 0; i < rows.length; i++) {
      var tr = rows[i], roles = (D.heads[tr.dataset.head] || {}).roles || [];
      var ok = role === "" || (role === "*" ? roles.length > 0 : role === "-" ? roles.length === 0
        : role === "+" ? roles.some(function (r) { return r !== "sink"; }) : roles.indexOf(role) >= 0);
      if (ok && q) ok = tr.dataset.head.indexOf(q) === 0 || roles.join(" ").toLowerCase().indexOf(q) >= 0;
      tr.hidden = !ok;
      if (ok) shown++;
    }
    count.textContent = shown + " of " + rows.length + " heads";
  }
  roleSel.addEventListener("change", filter);
  search.addEventListener("input", filter);
  if (roleSel.value !== "") filter();  // the page may open filtered (sinks as a population: the heads with another role)
  select(D.initial, false);
})();
