// jobq/web/static/jobq.js -- the dashboard's only script (the CSP allows no other).
//
// On a page whose <body> has data-live="MS": every MS milliseconds, fetch
// /api/overview and put each queue's counts into the elements marked
// data-q="QUEUE" data-f="FIELD" (as text, never as HTML), and reload the
// charts (img[data-live-src]).  On the dead-letter page, "select all"
// ticks every job's box.
"use strict";

function jobqRefresh() {
  fetch("/api/overview", { credentials: "same-origin", cache: "no-store" })
    .then(function (r) { return r.ok ? r.json() : null; })
    .then(function (data) {
      if (!data) { return; }
      data.queues.forEach(function (q) {
        document.querySelectorAll("[data-q]").forEach(function (el) {
          if (el.getAttribute("data-q") !== q.queue) { return; }
          var f = el.getAttribute("data-f");
          if (Object.prototype.hasOwnProperty.call(q, f)) {
            el.textContent = String(q[f]);
          }
        });
      });
      if (data.queues.length > 0) {
        document.querySelectorAll("[data-f=counted_at]").forEach(function (el) {
          el.textContent = data.queues[0].counted_at;
        });
      }
      document.querySelectorAll("img[data-live-src]").forEach(function (img) {
        img.src = img.getAttribute("data-live-src") + "&t=" + Date.now();
      });
      document.body.setAttribute("data-refreshed", String(Date.now()));
    })
    .catch(function () { /* the next round tries again */ });
}

document.addEventListener("DOMContentLoaded", function () {
  var live = parseInt(document.body.getAttribute("data-live") || "0", 10);
  if (live > 0) {
    window.setInterval(jobqRefresh, live);
  }
  var all = document.getElementById("select-all");
  if (all) {
    all.addEventListener("change", function () {
      document.querySelectorAll('input[type=checkbox][form=selected]').forEach(function (b) {
        b.checked = all.checked;
      });
    });
  }
});
