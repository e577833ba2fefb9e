// An open session's page follows it: every few seconds it asks the
// session's state (its step count and whether it is sealed, a cheap read);
// when that changed, the page is fetched again (which verifies the
// session) and the timeline, the verdict and the step count are replaced
// in place (no reload: the scroll position stays, and new steps only grow
// the page below; once the page's steps are complete, the links to the
// later page appear instead). A page before the last only shows the new
// count. Stops once the session is sealed.
const PERIOD_MS = 3000;

function swap(selector, doc) {
  const here = document.querySelector(selector);
  const there = doc.querySelector(selector);
  if (here && there) here.replaceWith(document.adoptNode(there));
}

async function changed() {
  const response = await fetch(`${location.pathname}/state`, { credentials: "same-origin" });
  if (!response.ok) return false;
  const state = await response.json();
  const here = document.querySelector("ol.timeline");
  if (!state.sealed && here && document.querySelector("a[rel=next]")) {
    // A page before the last one: new steps land on a later page, so
    // only the count changes here (no refetch, no verification).
    document.getElementById("live").textContent = `${state.step_count} steps; later pages hold the new ones`;
    return false;
  }
  return state.sealed || !here || here.dataset.count !== String(state.step_count);
}

async function poll() {
  try {
    const response = (await changed())
      ? await fetch(location.pathname + location.search, { credentials: "same-origin", headers: { Accept: "text/html" } })
      : null;
    if (response && response.ok) {
      const doc = new DOMParser().parseFromString(await response.text(), "text/html");
      const here = document.querySelector("ol.timeline");
      const there = doc.querySelector("ol.timeline");
      if (here && there && here.dataset.count !== there.dataset.count) {
        swap("ol.timeline", doc);
        swap("section.verdict", doc);
        swap("dl.facts", doc);
        swap("#pager-top", doc);
        swap("#pager-bottom", doc);
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
