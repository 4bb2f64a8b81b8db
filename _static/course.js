// The site as readers meet it (course/sphinxext.py): MathJax draws Chinese in the site's font, inline formulas
// wider than their line scroll, and search snippets show formulas as text instead of raw TeX.
(function () {
  "use strict";
  const CJK_FONT = '"Course CJK"';

  // Mark inline formulas wider than the line they sit in (a phone), so that they scroll (course.css).
  function markWideMath() {
    for (const span of document.querySelectorAll("span.math")) {
      const formula = span.querySelector("mjx-container");
      if (!formula) continue;
      const wide = formula.getBoundingClientRect().width > span.clientWidth + 2;
      span.classList.toggle("course-scroll-x", wide || (span.classList.contains("course-scroll-x") && span.scrollWidth > span.clientWidth + 2));
    }
  }
  let pending = false;
  window.addEventListener("resize", () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; markWideMath(); });
  });

  // MathJax (loaded after this file, deferred; Sphinx has already set window.MathJax's options): characters
  // its own fonts lack (Chinese, in \text{} or as subscripts) use the site's Chinese font, and the first
  // typeset waits for that font, so that MathJax measures the glyphs it will show.
  const mathjax = (window.MathJax = window.MathJax || {});
  mathjax.chtml = Object.assign({}, mathjax.chtml, { unknownFamily: `${CJK_FONT}, serif` });
  mathjax.startup = Object.assign({}, mathjax.startup, {
    pageReady() {
      const font = document.fonts ? document.fonts.load(`1em ${CJK_FONT}`, "我").catch(() => []) : Promise.resolve();
      return font.then(() => window.MathJax.startup.defaultPageReady()).then(markWideMath);
    },
  });

  // Search snippets: Sphinx shows the text of the page, where a formula is its TeX source (\(\sqrt{d_k}\)).
  // Replace each formula by a plain-text reading of it before the snippet is cut.
  const SYMBOLS = {
    top: "ᵀ", cdot: "·", times: "×", le: "≤", leq: "≤", ge: "≥", geq: "≥", ne: "≠", neq: "≠", approx: "≈",
    in: "∈", infty: "∞", sum: "Σ", prod: "Π", to: "→", rightarrow: "→", leftarrow: "←", mapsto: "↦",
    ldots: "…", cdots: "⋯", dots: "…", pm: "±", partial: "∂", nabla: "∇", sim: "∼", propto: "∝", odot: "⊙",
    otimes: "⊗", circ: "∘", lVert: "‖", rVert: "‖", Vert: "‖", lvert: "|", rvert: "|", mid: "|", langle: "⟨",
    rangle: "⟩", alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε", eta: "η",
    theta: "θ", lambda: "λ", mu: "μ", pi: "π", rho: "ρ", sigma: "σ", tau: "τ", phi: "φ", varphi: "φ",
    psi: "ψ", omega: "ω", Delta: "Δ", Sigma: "Σ", Omega: "Ω", Theta: "Θ", Phi: "Φ", ell: "ℓ",
  };
  const SETS = { R: "ℝ", N: "ℕ", Z: "ℤ", C: "ℂ", Q: "ℚ", E: "𝔼" };
  function texToText(tex) {
    let s = tex.trim().replace(/^\\\(|\\\)$|^\\\[|\\\]$|^\$\$?|\$\$?$/g, "");
    s = s.replace(/\^\{?\\top\}?/g, "ᵀ").replace(/\\begin\{[^}]*\}|\\end\{[^}]*\}/g, " ").replace(/\\\\/g, "; ").replace(/&/g, " ");
    for (let i = 0; i < 4; i++) {  // innermost first, a few levels deep
      s = s.replace(/\\mathbb\{(\w)\}/g, (m, c) => SETS[c] || c)
        .replace(/\\sqrt\{([^{}]*)\}/g, "√$1")
        .replace(/\\frac\{([^{}]*)\}\{([^{}]*)\}/g, "($1)/($2)")
        .replace(/\\(?:mathrm|text|textbf|mathbf|boldsymbol|operatorname|mathcal|mathit|mathsf|mathtt|bm)\{([^{}]*)\}/g, "$1")
        .replace(/\\(?:underbrace|overbrace)\{([^{}]*)\}_\{[^{}]*\}/g, "$1")
        .replace(/\\(?:underbrace|overbrace|hat|tilde|bar|vec|overline)\{([^{}]*)\}/g, "$1");
    }
    s = s.replace(/\\_/g, "_").replace(/\\(?:left|right|big|Big|bigg|Bigg)\b\\?/g, "")
      .replace(/\\[,;:!]|\\quad|\\qquad|~/g, " ")
      .replace(/\\([A-Za-z]+)/g, (m, name) => SYMBOLS[name] || name)
      .replace(/\^\{([^{}]*)\}/g, "^$1").replace(/_\{([^{}]*)\}/g, "_$1")
      .replace(/[{}]/g, "").replace(/\s+/g, " ");
    return s.trim();
  }
  window.courseTexToText = texToText;
  document.addEventListener("DOMContentLoaded", () => {
    if (typeof Search === "undefined" || !Search.htmlToText) return; // eslint-disable-line no-undef
    // Result titles come from the search index, where a heading's formula is its bare TeX (\sqrt{d_k}).
    new MutationObserver((records) => {
      for (const record of records) {
        for (const node of record.addedNodes) {
          if (!(node instanceof Element)) continue;
          for (const a of node.matches("li") ? node.querySelectorAll(":scope > a") : []) {
            if (/\\[A-Za-z]/.test(a.textContent)) a.textContent = texToText(a.textContent);
          }
        }
      }
    }).observe(document.body, { childList: true, subtree: true });
    const htmlToText = Search.htmlToText; // eslint-disable-line no-undef
    Search.htmlToText = (htmlString, anchor) => { // eslint-disable-line no-undef
      const doc = new DOMParser().parseFromString(htmlString, "text/html");
      doc.querySelectorAll(".math").forEach((el) => { el.textContent = ` ${texToText(el.textContent)} `; });
      return htmlToText(doc.documentElement.outerHTML, anchor);
    };
  });
})();
