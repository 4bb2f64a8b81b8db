// Run before any script of every page that tests/test_site.py opens in headless Chromium (through the DevTools
// protocol, which also records JavaScript errors). `window.__siteProbe` is a promise of the page's report: it
// waits until the page is ready (load event, MathJax's first typeset, web fonts, image decoding: each a promise,
// no timers), then measures the page. The test waits for it with a time limit.
(() => {
  "use strict";
  const loaded = () => new Promise((resolve) => {
    if (document.readyState === "complete") resolve();
    else window.addEventListener("load", resolve, { once: true });
  });

  const describe = (el) => {
    let s = el.tagName.toLowerCase();
    if (el.id) s += `#${el.id}`;
    if (el.classList.length) s += "." + [...el.classList].slice(0, 3).join(".");
    const text = (el.textContent || "").trim().replace(/\s+/g, " ").slice(0, 60);
    return text ? `${s} "${text}"` : s;
  };
  const visible = (el) => {
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && getComputedStyle(el).visibility !== "hidden";
  };

  function measure() {
    const root = document.documentElement;
    const article = document.querySelector("article") || document.body;
    // 1. Horizontal overflow of the page, and content clipped by a box that does not scroll.
    const viewport = root.clientWidth;
    const overflow = { viewport, page: root.scrollWidth, culprits: [], clipped: [] };
    // Inside a box that scrolls or clips, sticking out does not widen the page.
    const contained = (el) => {
      for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
        if (getComputedStyle(a).overflowX !== "visible") return true;
      }
      return false;
    };
    if (root.scrollWidth > viewport + 1) {
      for (const el of document.body.querySelectorAll("*")) {
        const r = el.getBoundingClientRect();
        if (r.right > viewport + 1 && visible(el) && getComputedStyle(el).position !== "fixed" && !contained(el)) {
          // report the outermost element that sticks out, not every descendant
          if (!overflow.culprits.some((c) => c.el.contains(el))) overflow.culprits.push({ el, right: Math.round(r.right) });
        }
        if (overflow.culprits.length >= 5) break;
      }
    }
    // A box that hides its overflow clips content if a visible descendant sticks out of it (MathJax's
    // assistive MathML is clipped on purpose, for screen readers only, and does not count).
    const assistive = (d) => d.closest("mjx-assistive-mml") !== null;
    for (const el of article.querySelectorAll("*")) {
      const style = getComputedStyle(el);
      if (!(style.overflowX === "hidden" || style.overflowX === "clip") || el.scrollWidth <= el.clientWidth + 1 || !visible(el)) continue;
      if (assistive(el)) continue;
      const box = el.getBoundingClientRect();
      let right = box.right;
      for (const d of el.querySelectorAll("*")) {
        if (assistive(d)) continue;
        const r = d.getBoundingClientRect();
        if (r.width > 0 && r.height > 0) right = Math.max(right, r.right);
      }
      if (right > box.right + 2) overflow.clipped.push(`${describe(el)}: ${Math.round(right - box.right)}px cut off on the right`);
    }
    overflow.culprits = overflow.culprits.map((c) => `${describe(c.el)} reaches ${c.right}px`);

    // 2. Images: how wide each is shown (against its natural width and its column, the nearest box that is not
    // inline: a link around the image does not count), where its right edge is, and whether a link around it
    // opens the image itself (its full size).
    const images = [];
    const column = (el) => {
      let box = el.parentElement;
      while (box.parentElement && getComputedStyle(box).display.startsWith("inline")) box = box.parentElement;
      return box.clientWidth;
    };
    const path = (url) => new URL(url, document.baseURI).pathname;
    for (const img of article.querySelectorAll("img")) {
      if (!img.naturalWidth || !visible(img)) continue;
      const r = img.getBoundingClientRect();
      const link = img.closest("a[href]");
      images.push({ src: img.getAttribute("src"), url: img.src, natural: img.naturalWidth,
                    shown: Math.round(r.width * 10) / 10, column: column(img), right: Math.round(r.right),
                    fullSize: !!link && path(link.href) === path(img.currentSrc || img.src) });
    }

    // 3. Formulas: every .math element typeset by MathJax, without TeX errors or TeX commands shown as text;
    // display equations no wider than their column.
    const maths = [...document.querySelectorAll(".math")];
    const untypeset = maths.filter((m) => !m.querySelector("mjx-container")).map((m) => m.textContent.trim().slice(0, 80));
    const texErrors = [...document.querySelectorAll("mjx-merror")].map((m) => (m.getAttribute("data-mjx-error") || m.textContent).slice(0, 80));
    // A TeX command that MathJax shows as text (\text{max\_norm} prints its backslash): MathJax's copy for
    // screen readers has the text of each \text{} as it is shown.
    const rawTex = [...document.querySelectorAll("mjx-assistive-mml mtext")].map((t) => t.textContent)
      .filter((t) => t.includes("\\")).slice(0, 5);
    // Display equations wider than their column (they scroll sideways inside their box): the typeset formula
    // (mjx-math) against the width its container has (what is left of the column beside an equation number).
    const tex = (el) => {
      try {
        const item = window.MathJax.startup.document.getMathItemsWithin(el)[0];
        if (item) return item.math.trim().replace(/\s+/g, " ").slice(0, 70);
      } catch (e) { /* no MathJax API: describe the element instead */ }
      return describe(el);
    };
    const wideEquations = [];
    for (const box of document.querySelectorAll('mjx-container[display="true"]')) {
      const formula = box.querySelector(":scope > mjx-math");
      if (!formula || !visible(box)) continue;
      const wide = formula.getBoundingClientRect().width;
      if (wide > box.clientWidth + 1) wideEquations.push({ tex: tex(box), width: Math.round(wide), column: box.clientWidth });
    }

    // 4. Text, for the Chinese characters (checked against the served font in Python), and the web fonts.
    const text = document.title + "\n" + document.body.textContent + "\n" +
      [...document.querySelectorAll("[alt],[title],[aria-label],[placeholder]")].map(
        (el) => [el.getAttribute("alt"), el.getAttribute("title"), el.getAttribute("aria-label"), el.getAttribute("placeholder")].join(" ")).join(" ");
    const fonts = [...document.fonts].map((f) => ({ family: f.family.replace(/^["']|["']$/g, ""), status: f.status }));

    // The body's small print: code and cell output (0.875 rem in this theme), what figure text must match.
    const small = document.querySelector("div.cell_output pre, div.highlight pre");
    const smallPrint = parseFloat(getComputedStyle(small || document.documentElement).fontSize) * (small ? 1 : 0.875);

    return { overflow, images, smallPrint, formulas: maths.length, untypeset, texErrors, rawTex, wideEquations, text, fonts,
             width: window.innerWidth, mathjax: !!(window.MathJax && window.MathJax.startup) };
  }

  window.__siteProbe = (async () => {
    await loaded();
    if (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise) await window.MathJax.startup.promise;
    await document.fonts.ready;
    await Promise.all([...document.images].map((img) => img.decode().catch(() => undefined)));
    return measure();
  })();
})();
