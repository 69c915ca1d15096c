// tidegate dashboard: refresh the live part of a page when the event stream says something changed
// (or every 5 s when the stream is refused), keeping the filters, the scroll and what is open.
(() => {
  "use strict";
  const live = document.querySelector("[data-live]");
  const state = document.querySelector("[data-live-state]");
  const FALLBACK_MS = 5000;
  const AGES_MS = 30000; // a quiet stream still refreshes now and then, so "12 s ago" stays true
  const MIN_GAP_MS = 700;
  let timer = null;
  let last = 0;
  let polling = null;

  // Confirm buttons and auto-submitting selects, wired without inline script.
  document.addEventListener("submit", (event) => {
    const message = event.target.dataset && event.target.dataset.confirm;
    if (message && !window.confirm(message)) event.preventDefault();
  });
  document.addEventListener("change", (event) => {
    if (event.target.matches("select[data-autosubmit]")) event.target.form.submit();
  });

  // A link to a scope (#scope-...) opens its holders.
  const target = window.location.hash && document.getElementById(window.location.hash.slice(1));
  if (target) target.querySelectorAll("details").forEach((details) => { details.open = true; });

  // A box that scrolls sideways (a wide table or argument on a phone) takes the keyboard's focus,
  // so arrow keys can scroll it; one that fits is no tab stop.
  function scrollers() {
    document.querySelectorAll(".table-wrap, pre.code, .dag-wrap").forEach((box) => {
      if (box.scrollWidth > box.clientWidth) box.tabIndex = 0; else box.removeAttribute("tabindex");
    });
  }
  scrollers();
  window.addEventListener("resize", scrollers);
  document.addEventListener("tidegate:refreshed", scrollers);

  if (!live || !state) return;

  // A page answering a form (a refused retry) names its own address: reloads and refreshes use it.
  const canonical = live.dataset.canonical;
  if (canonical && canonical !== window.location.pathname + window.location.search) {
    window.history.replaceState(null, "", canonical);
  }
  // A form's answer with no address of its own (a limit's preview) is not refreshed: it would be lost.
  if ("answer" in live.dataset) {
    state.textContent = "Not live (a form's answer)";
    state.classList.add("off");
    return;
  }

  function busy() {
    const focused = document.activeElement;
    return focused && live.contains(focused) && focused.matches("input, select, textarea");
  }

  async function refresh() {
    timer = null;
    if (document.hidden || busy()) { schedule(FALLBACK_MS); return; }
    last = Date.now();
    let response;
    try {
      response = await fetch(window.location.href, { credentials: "same-origin", headers: { "X-Tidegate-Refresh": "1" } });
    } catch (error) {
      return;
    }
    if (!response.ok || response.redirected) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html").querySelector("[data-live]");
    if (!fresh) return;
    const open = new Set([...live.querySelectorAll("details[id]")].filter((d) => d.open).map((d) => d.id));
    const closed = new Set([...live.querySelectorAll("details[id]")].filter((d) => !d.open).map((d) => d.id));
    const x = window.scrollX, y = window.scrollY;
    live.replaceChildren(...fresh.childNodes);
    live.querySelectorAll("details[id]").forEach((d) => {
      if (open.has(d.id)) d.open = true;
      if (closed.has(d.id)) d.open = false;
    });
    window.scrollTo(x, y);
    live.dispatchEvent(new CustomEvent("tidegate:refreshed", { bubbles: true }));
  }

  function schedule(delay) {
    if (timer !== null) return;
    const wait = delay !== undefined ? delay : Math.max(0, MIN_GAP_MS - (Date.now() - last));
    timer = window.setTimeout(refresh, wait);
  }

  function poll() {
    if (polling !== null) return;
    state.textContent = "Refreshing every 5 s";
    state.classList.add("polling");
    polling = window.setInterval(() => schedule(0), FALLBACK_MS);
  }

  if (!("EventSource" in window)) { poll(); return; }
  const source = new EventSource(live.dataset.stream);
  const kinds = (live.dataset.events || "").split(" ").filter(Boolean);
  kinds.forEach((kind) => source.addEventListener(kind, () => schedule()));
  source.addEventListener("message", () => schedule());
  let opened = false;
  source.addEventListener("open", () => {
    // What changed between rendering the page and the stream's start was not streamed: refresh once.
    if (!opened) { opened = true; schedule(); }
    state.textContent = "Live";
    state.classList.remove("polling");
    if (polling !== null) { window.clearInterval(polling); polling = null; }
  });
  // Refused (closed) or dropped (the browser retries by itself): poll meanwhile; "open" stops it.
  source.addEventListener("error", poll);
  window.setInterval(() => schedule(), AGES_MS);
  window.addEventListener("pagehide", () => source.close());
})();
