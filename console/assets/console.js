// sandflow console: live regions. An element with data-stream holds HTML
// the server renders; each server-sent event replaces it with a newer
// rendering (already escaped by the server's templates). An "end" event
// closes the stream: the run has ended.
"use strict";
document.querySelectorAll("[data-stream]").forEach(function (el) {
  var es = new EventSource(el.getAttribute("data-stream"));
  es.onmessage = function (ev) {
    // Keep what the operator is typing in a field of the region.
    var active = document.activeElement;
    if (active && el.contains(active) && (active.tagName === "TEXTAREA" || active.tagName === "INPUT")) {
      return;
    }
    el.innerHTML = ev.data;
    el.setAttribute("data-updates", String(Number(el.getAttribute("data-updates") || "0") + 1));
  };
  es.addEventListener("end", function () {
    es.close();
    el.setAttribute("data-ended", "true");
  });
});
