// A tiny, safe markdown renderer: headings, lists, fenced and inline code, bold, paragraphs.
// It builds DOM nodes from text (never innerHTML), so any HTML in the source shows as text.
"use strict";

(function (global) {
  function inline(text, parent) {
    // `code` first, then **bold** inside the remaining text.
    const parts = text.split(/(`[^`\n]+`)/);
    for (const part of parts) {
      if (part.length > 1 && part.startsWith("`") && part.endsWith("`")) {
        const code = document.createElement("code");
        code.textContent = part.slice(1, -1);
        parent.appendChild(code);
        continue;
      }
      const bolds = part.split(/(\*\*[^*\n]+\*\*)/);
      for (const piece of bolds) {
        if (piece.length > 4 && piece.startsWith("**") && piece.endsWith("**")) {
          const strong = document.createElement("strong");
          strong.textContent = piece.slice(2, -2);
          parent.appendChild(strong);
        } else if (piece) {
          parent.appendChild(document.createTextNode(piece));
        }
      }
    }
  }

  function render(source) {
    const root = document.createDocumentFragment();
    const lines = String(source || "").replace(/\r\n?/g, "\n").split("\n");
    let paragraph = null;
    let list = null;
    let i = 0;

    function close() {
      paragraph = null;
      list = null;
    }

    while (i < lines.length) {
      const line = lines[i];
      const fence = line.match(/^\s*(```|~~~)\s*([\w+-]*)\s*$/);
      if (fence) {
        close();
        const body = [];
        i += 1;
        while (i < lines.length && !lines[i].trim().startsWith(fence[1])) {
          body.push(lines[i]);
          i += 1;
        }
        const pre = document.createElement("pre");
        const code = document.createElement("code");
        if (fence[2]) code.dataset.lang = fence[2];
        code.textContent = body.join("\n");
        pre.appendChild(code);
        root.appendChild(pre);
        i += 1; // the closing fence
        continue;
      }
      const heading = line.match(/^(#{1,6})\s+(.*?)\s*#*\s*$/);
      if (heading) {
        close();
        // Shifted down two levels: the page's own headings stay above the summary's.
        const level = Math.min(6, heading[1].length + 2);
        const h = document.createElement("h" + level);
        inline(heading[2], h);
        root.appendChild(h);
        i += 1;
        continue;
      }
      const item = line.match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
      if (item) {
        const ordered = /\d/.test(item[1]);
        const tag = ordered ? "OL" : "UL";
        if (!list || list.tagName !== tag) {
          paragraph = null;
          list = document.createElement(tag.toLowerCase());
          root.appendChild(list);
        }
        const li = document.createElement("li");
        inline(item[2], li);
        list.appendChild(li);
        i += 1;
        continue;
      }
      if (!line.trim()) {
        close();
        i += 1;
        continue;
      }
      if (list && /^\s{2,}\S/.test(line)) {
        // A continuation line of the last list item.
        const last = list.lastElementChild;
        last.appendChild(document.createTextNode(" "));
        inline(line.trim(), last);
        i += 1;
        continue;
      }
      list = null;
      if (!paragraph) {
        paragraph = document.createElement("p");
        root.appendChild(paragraph);
      } else {
        paragraph.appendChild(document.createTextNode(" "));
      }
      inline(line.trim(), paragraph);
      i += 1;
    }
    return root;
  }

  global.XunMarkdown = { render: render };
})(window);
