// kbctl Lens: the little the console does in the browser. Every page works without it; with it, tables marked
// data-refresh update in place, and "/" jumps to the page's search field.
"use strict";

function refresh(target) {
  var url = target.getAttribute("data-refresh");
  var every = Math.max(2, parseInt(target.getAttribute("data-every") || "5", 10)) * 1000;
  function tick() {
    if (document.hidden) { return; }
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (response.status === 401) { window.location.reload(); return null; }
        return response.ok ? response.text() : null;
      })
      .then(function (html) { if (html !== null && html !== target.innerHTML) { target.innerHTML = html; } })
      .catch(function () { /* the server is restarting: try again at the next tick */ });
  }
  window.setInterval(tick, every);
}

document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("[data-refresh]").forEach(refresh);
  document.addEventListener("keydown", function (event) {
    var typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement && document.activeElement.tagName);
    if (event.key === "/" && !typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
      var field = document.querySelector("[data-shortcut='/']");
      if (field) { event.preventDefault(); field.focus(); field.select(); }
    }
  });
});
