// The review desk's only script (served from /static/, allowed by the page's CSP; no inline
// script anywhere). Three things: the overview's live figures, the keyboard (moving, and
// deciding on the list and on one answer), and a citation marker's hover text naming its
// source's resolved destination.
(function () {
  "use strict";
  var page = document.body.dataset.page;

  function formatted(n) { return Number(n).toLocaleString("en"); }

  function refresh() {
    fetch("/overview.json", { cache: "no-store", credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (f) {
        var set = function (name, text) {
          var el = document.querySelector('[data-field="' + name + '"]');
          if (el) { el.textContent = text; }
        };
        set("total", formatted(f.total));
        set("terminal", formatted(f.terminal));
        set("answers", formatted(f.answers));
        set("grounded_rate", f.grounded_rate === null ? "\u2013" :
          (100 * f.grounded_rate).toFixed(1) + " %");
        set("spend_usd", "$" + f.spend_usd);
        Object.keys(f.states).forEach(function (s) {
          var el = document.querySelector('[data-state="' + CSS.escape(s) + '"]');
          if (el) { el.textContent = formatted(f.states[s]); }
        });
        Object.keys(f.reviews).forEach(function (s) {
          var el = document.querySelector('[data-review="' + CSS.escape(s) + '"]');
          if (el) { el.textContent = formatted(f.reviews[s]); }
        });
        var bar = document.getElementById("done-bar");
        if (bar) { bar.max = f.total || 1; bar.value = f.terminal; }
        document.getElementById("polled").textContent =
          "live, read " + new Date().toLocaleTimeString();
      })
      .catch(function () { document.getElementById("polled").textContent = "not reachable"; });
  }

  function typing(event) {
    var t = event.target;
    return t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT");
  }

  function listKeys() {
    var rows = Array.prototype.slice.call(document.querySelectorAll("#answers tbody tr[data-href]"));
    var at = -1;
    function mark(i) {
      if (!rows.length) { return; }
      if (at >= 0) { rows[at].classList.remove("current"); }
      at = Math.max(0, Math.min(rows.length - 1, i));
      rows[at].classList.add("current");
      rows[at].scrollIntoView({ block: "nearest" });
    }
    var form = document.getElementById("list-review");
    var verdicts = { a: "approved", r: "rejected", e: "needs_edit" };
    // A decision on the marked row, posted as the answer page's form would be; the row shows
    // it once stored, and the mark moves on.
    function decide(row, verdict) {
      var said = document.getElementById("decided");
      var data = new FormData(form);
      if (!data.get("reviewer")) { said.textContent = "type your name first"; return; }
      data.set("verdict", verdict);
      fetch(row.dataset.href + "/review", {
        method: "POST", body: data, credentials: "same-origin", redirect: "manual"
      }).then(function (r) {
        if (r.type !== "opaqueredirect" && !r.ok) { throw new Error(String(r.status)); }
        var cell = row.querySelector("td.review");
        cell.textContent = verdict;
        cell.className = "review review-" + verdict;
        said.textContent = row.dataset.qid + ": " + verdict.replace("_", " ");
      }).catch(function (err) {
        said.textContent = row.dataset.qid + ": not stored (" + err.message + ")";
      });
    }
    document.addEventListener("keydown", function (e) {
      if (typing(e) || e.ctrlKey || e.metaKey || e.altKey) { return; }
      if (e.key === "j") { mark(at + 1); }
      else if (e.key === "k") { mark(at - 1); }
      else if (e.key === "Enter" && at >= 0) { window.location.href = rows[at].dataset.href; }
      else if (verdicts[e.key] && at >= 0 && rows[at].hasAttribute("data-answered")) {
        decide(rows[at], verdicts[e.key]);
        mark(at + 1);
      }
    });
  }

  function answerKeys() {
    document.addEventListener("keydown", function (e) {
      if (typing(e) || e.ctrlKey || e.metaKey || e.altKey) { return; }
      var go = function (id) {
        var a = document.getElementById(id);
        if (a) { window.location.href = a.href; }
      };
      if (e.key === "j") { go("next-answer"); return; }
      if (e.key === "k") { go("prev-answer"); return; }
      var button = document.querySelector('.review-form button[data-key="' + e.key + '"]');
      if (button && document.querySelector('.review-form input[name="reviewer"]').value) {
        button.click();
      }
    });
    // A marker's hover text: the source's title and where its link resolved to.
    document.querySelectorAll("sup.cite a[href]").forEach(function (a) {
      a.title = (a.title ? a.title + "\n" : "") + a.href;
    });
  }

  if (page === "overview") { refresh(); window.setInterval(refresh, 3000); }
  if (page === "answers") { listKeys(); }
  if (page === "answer") { answerKeys(); }
})();
