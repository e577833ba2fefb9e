// An open session's page follows it: every few seconds the page is fetched
// again and, if steps were added, the timeline, the verdict and the step
// count are replaced in place (no reload: the scroll position stays, and
// new steps only grow the page below). Stops once the session is sealed.
const PERIOD_MS = 3000;

function swap(selector, doc) {
  const here = document.querySelector(selector);
  const there = doc.querySelector(selector);
  if (here && there) here.replaceWith(document.adoptNode(there));
}

async function poll() {
  try {
    const response = await fetch(location.pathname, { credentials: "same-origin", headers: { Accept: "text/html" } });
    if (response.ok) {
      const doc = new DOMParser().parseFromString(await response.text(), "text/html");
      const here = document.querySelector("ol.timeline");
      const there = doc.querySelector("ol.timeline");
      if (here && there && here.dataset.count !== there.dataset.count) {
        swap("ol.timeline", doc);
        swap("section.verdict", doc);
        swap("dl.facts", doc);
        document.getElementById("live").textContent = `${there.dataset.count} steps; updated ${new Date().toLocaleTimeString()}`;
      }
      if (doc.querySelector("[data-sealed='true']")) {
        swap("dl.facts", doc);
        document.getElementById("live").textContent = "The session is sealed.";
        return;
      }
    }
  } catch {
    // The server is away for a moment: try again at the next period.
  }
  setTimeout(poll, PERIOD_MS);
}

setTimeout(poll, PERIOD_MS);
