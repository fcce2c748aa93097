// strata console, rule editor: click zones and lines onto a camera's frame and read the YAML
// of its whole `rules.cameras.<id>` entry (the configured rules plus the drawn ones, in the
// frame's pixels with frame_size). Nothing is saved: the config file stays the truth.
// No framework, no build step; every value reaches the page as text, never as HTML.
"use strict";

(function () {
  const svg = document.getElementById("editor");
  if (!svg) return;
  const NS = "http://www.w3.org/2000/svg";
  const base = JSON.parse(svg.dataset.rules);
  const camera = svg.dataset.camera;
  const [width, height] = base.frame_size;
  const layer = document.getElementById("drawn");
  const nameBox = document.getElementById("shape-name");
  const finish = document.getElementById("finish");
  const status = document.getElementById("editor-status");
  const out = document.getElementById("yaml");
  const drawn = { zones: [], lines: [] };
  let pending = [];

  function mode() {
    return document.querySelector('input[name="shape"]:checked').value;
  }

  // Names are unique per camera across zones, lines, dwell rules and the stationary rule.
  function taken() {
    const names = new Set();
    for (const section of ["zones", "lines", "dwell"]) {
      for (const r of (base[section] || []).concat(drawn[section] || [])) names.add(r.name);
    }
    const st = base.stationary || {};
    if (st.enabled !== false) names.add(st.name || "stationary");
    return names;
  }

  function freeName(kind) {
    const names = taken();
    let i = 1;
    while (names.has(kind + "-" + i)) i++;
    return kind + "-" + i;
  }

  function say(text) { status.textContent = text; }

  // A click in frame pixels (the SVG scales with the window), whole pixels inside the frame.
  function framePoint(evt) {
    const pt = svg.createSVGPoint();
    pt.x = evt.clientX;
    pt.y = evt.clientY;
    const p = pt.matrixTransform(svg.getScreenCTM().inverse());
    const clamp = (v, hi) => Math.min(hi, Math.max(0, Math.round(v)));
    return [clamp(p.x, width), clamp(p.y, height)];
  }

  function shape(tag, cls, points, title) {
    const el = document.createElementNS(NS, tag);
    el.setAttribute("class", cls);
    el.setAttribute("points", points.map((p) => p.join(",")).join(" "));
    if (title) {
      const t = document.createElementNS(NS, "title");
      t.textContent = title;
      el.appendChild(t);
    }
    layer.appendChild(el);
  }

  function draw() {
    layer.replaceChildren();
    for (const z of drawn.zones) shape("polygon", "zone drawn", z.points, "zone " + z.name);
    for (const l of drawn.lines) shape("polyline", "line drawn", l.points, "line " + l.name);
    if (pending.length) shape("polyline", "pending", pending, "");
    for (const [x, y] of pending) {
      const c = document.createElementNS(NS, "circle");
      c.setAttribute("class", "corner");
      c.setAttribute("cx", x);
      c.setAttribute("cy", y);
      c.setAttribute("r", 5);
      layer.appendChild(c);
    }
    out.value = yaml();
  }

  function commit(kind, points) {
    const name = nameBox.value.trim();
    if (!name) return say("give the " + kind + " a name");
    if (taken().has(name)) return say("the name " + name + " is taken on this camera");
    drawn[kind + "s"].push({ name: name, points: points });
    pending = [];
    nameBox.value = freeName(kind);
    say(kind + " " + name + " added");
    draw();
  }

  svg.addEventListener("click", function (evt) {
    const p = framePoint(evt);
    const last = pending[pending.length - 1];
    if (last && last[0] === p[0] && last[1] === p[1]) return; // a double click
    pending.push(p);
    if (mode() === "line" && pending.length === 2) commit("line", pending);
    else draw();
  });
  finish.addEventListener("click", function () {
    if (mode() !== "zone") return;
    if (pending.length < 3) return say("a zone needs at least 3 corners");
    commit("zone", pending);
  });
  document.getElementById("undo").addEventListener("click", function () {
    pending.pop();
    draw();
  });
  document.getElementById("clear").addEventListener("click", function () {
    drawn.zones = [];
    drawn.lines = [];
    pending = [];
    nameBox.value = freeName(mode());
    draw();
  });
  for (const radio of document.querySelectorAll('input[name="shape"]')) {
    radio.addEventListener("change", function () {
      pending = [];
      nameBox.value = freeName(mode());
      finish.disabled = mode() !== "zone";
      draw();
    });
  }
  document.getElementById("copy").addEventListener("click", function () {
    out.select();
    const done = () => say("copied");
    if (navigator.clipboard) navigator.clipboard.writeText(out.value).then(done, () => say("select and copy the text"));
    else say("select and copy the text");
  });

  // YAML: block mappings, lists of mappings as "- key: ...", lists of plain values (points,
  // labels) in flow style; every string double-quoted (JSON strings are YAML strings).
  const isMap = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
  const key = (k) => (/^[A-Za-z_][A-Za-z0-9_]*$/.test(k) ? k : JSON.stringify(k));
  function flow(v) {
    if (Array.isArray(v)) return "[" + v.map(flow).join(", ") + "]";
    if (isMap(v)) return "{" + Object.keys(v).map((k) => key(k) + ": " + flow(v[k])).join(", ") + "}";
    return typeof v === "string" ? JSON.stringify(v) : String(v);
  }
  function block(map, pad) {
    const lines = [];
    for (const k of Object.keys(map)) {
      const v = map[k];
      const nested = isMap(v) ? Object.keys(v).length > 0 : Array.isArray(v) && v.some(isMap);
      if (!nested) {
        lines.push(pad + key(k) + ": " + flow(v));
      } else if (Array.isArray(v)) {
        lines.push(pad + key(k) + ":");
        for (const item of v) {
          const inner = isMap(item) ? block(item, pad + "    ") : [];
          lines.push(pad + "  - " + (inner.length ? inner[0].trimStart() : flow(item)));
          lines.push(...inner.slice(1));
        }
      } else {
        lines.push(pad + key(k) + ":");
        lines.push(...block(v, pad + "  "));
      }
    }
    return lines;
  }

  function yaml() {
    const entry = Object.assign({}, base);
    for (const section of ["zones", "lines"]) {
      const all = (base[section] || []).concat(drawn[section]);
      if (all.length) entry[section] = all;
    }
    const doc = { rules: { cameras: { [camera]: entry } } };
    return "# camera " + camera + ": its whole rules entry, in pixels of its " + width + "x" +
      height + " frame\n" + block(doc, "").join("\n") + "\n";
  }

  nameBox.value = freeName("zone");
  draw();
})();
