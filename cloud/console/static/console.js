// strata console: new events appear live (server-sent events). No framework, no build step.
// Every value goes into the page through textContent or a URL the server built: never HTML.
"use strict";

(function () {
  const table = document.getElementById("events");
  if (!table || !table.dataset.stream) return;
  const body = table.tBodies[0];
  const status = document.getElementById("live-status");
  const maxRows = 500;

  function cell(row, text, cls) {
    const td = row.insertCell();
    if (cls) td.className = cls;
    td.textContent = text;
    return td;
  }

  function rowFor(e) {
    const tr = document.createElement("tr");
    tr.className = "event " + e.kind + " fresh";
    tr.dataset.id = e.kind + "-" + e.id;
    const thumb = tr.insertCell();
    thumb.className = "thumb";
    if (e.thumb) {
      const img = document.createElement("img");
      img.src = e.thumb;
      img.alt = "snapshot";
      img.width = 64;
      img.height = 48;
      thumb.appendChild(img);
    } else {
      const span = document.createElement("span");
      span.className = "placeholder";
      span.textContent = "no snapshot";
      thumb.appendChild(span);
    }
    const time = document.createElement("time");
    time.dateTime = e.time;
    time.textContent = e.time;
    tr.insertCell().appendChild(time);
    cell(tr, e.camera, "camera");
    cell(tr, e.type, "type");
    cell(tr, e.label, "label");
    const verdict = cell(tr, e.verdict, "verdict");
    if (e.score !== null && e.verdict) {
      const small = document.createElement("small");
      small.textContent = " " + e.score.toFixed(2);
      verdict.appendChild(small);
    }
    cell(tr, e.zones.join(", "), "zones");
    cell(tr, e.rules.join(", "), "rules");
    cell(tr, e.duration_s === null ? "" : e.duration_s.toFixed(1) + " s", "duration");
    const a = document.createElement("a");
    a.href = e.url;
    a.textContent = "detail";
    tr.insertCell().appendChild(a);
    return tr;
  }

  const source = new EventSource(table.dataset.stream);
  source.addEventListener("event", function (msg) {
    const e = JSON.parse(msg.data);
    if (body.querySelector('tr[data-id="' + e.kind + "-" + e.id + '"]')) return;
    body.insertBefore(rowFor(e), body.firstChild);
    const empty = document.getElementById("empty");
    if (empty) empty.remove();
    while (body.rows.length > maxRows) body.deleteRow(-1);
  });
  source.addEventListener("reset", function () {
    // The server ended the stream (fell behind, feed lost, stopping): re-query.
    source.close();
    if (status) status.textContent = "reconnecting";
    setTimeout(function () { window.location.reload(); }, 2000);
  });
  source.onopen = function () { if (status) status.textContent = "live"; };
  source.onerror = function () { if (status) status.textContent = "reconnecting"; };
})();

// The clip player starts at the event the detail page is for. The src's media fragment
// (#t=) does it where the browser honours one; this covers those that do not, and the
// event at the clip's last frame: chromium lands a fragment past the last frame that has
// a duration one frame early, so the player seeks again to the moment (at most the end).
// data-started tells a reader (and the browser test) that the player is where it will stay.
(function () {
  const video = document.getElementById("clip");
  if (!video || video.tagName !== "VIDEO" || !video.dataset.seek) return;
  const seek = parseFloat(video.dataset.seek);
  function started() { video.dataset.started = "1"; }
  function start() {
    const target = isFinite(video.duration) ? Math.min(seek, video.duration) : seek;
    if (Math.abs(video.currentTime - target) <= 0.001) return started();
    video.addEventListener("seeked", started, { once: true });
    video.currentTime = target;
  }
  // After the first frame (not metadata): chromium moves currentTime to where the fragment
  // really landed only once that frame is decoded.
  if (video.readyState >= 2) start();
  else video.addEventListener("loadeddata", start, { once: true });
})();
