// A small Markdown renderer for model answers. The text is HTML-escaped
// before anything else, so the only markup in the result is what this file
// builds: code fences and inline code, headings, emphasis, lists, quotes,
// rules and http(s) links. An unclosed fence (an answer still streaming)
// runs to the end of the text.
"use strict";

(function () {
  const escape = (s) =>
    s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");

  const FENCE = /^\s*```\s*([\w+#.-]*)\s*$/;
  const HEADING = /^(#{1,6})\s+(.*)$/;
  const QUOTE = /^\s*&gt;/;
  const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;
  const ITEM = /^\s*([-*+]|\d+[.)])\s+(.*)$/;

  // Code spans are cut out first so that nothing inside them is formatted.
  function inline(s) {
    const codes = [];
    s = s.replace(/`([^`]+)`/g, (_, c) => {
      codes.push(c);
      return "\u0000" + (codes.length - 1) + "\u0000";
    });
    s = s
      .replace(/\*\*(?=\S)([^*]*?\S)\*\*/g, "<strong>$1</strong>")
      .replace(/__(?=\S)([^_]*?\S)__/g, "<strong>$1</strong>")
      .replace(/(^|[^*\w])\*(?=\S)([^*]*?\S)\*(?![*\w])/g, "$1<em>$2</em>")
      .replace(/(^|[^_\w])_(?=\S)([^_]*?\S)_(?![_\w])/g, "$1<em>$2</em>")
      .replace(
        /\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g,
        '<a href="$2" target="_blank" rel="noopener noreferrer">$1</a>'
      );
    return s.replace(/\u0000(\d+)\u0000/g, (_, i) => "<code>" + codes[+i] + "</code>");
  }

  const startsBlock = (l) =>
    FENCE.test(l) || HEADING.test(l) || QUOTE.test(l) || RULE.test(l) || ITEM.test(l);

  // `lines` are already escaped.
  function blocks(lines) {
    const out = [];
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if ((m = line.match(FENCE))) {
        const body = [];
        for (i++; i < lines.length && !/^\s*```\s*$/.test(lines[i]); i++) body.push(lines[i]);
        i++;
        const lang = m[1] ? ' class="language-' + m[1] + '"' : "";
        out.push("<pre><code" + lang + ">" + body.join("\n") + "</code></pre>");
      } else if ((m = line.match(HEADING))) {
        const n = m[1].length;
        out.push("<h" + n + ">" + inline(m[2]) + "</h" + n + ">");
        i++;
      } else if (QUOTE.test(line)) {
        const body = [];
        for (; i < lines.length && QUOTE.test(lines[i]); i++) body.push(lines[i].replace(/^\s*&gt;\s?/, ""));
        out.push("<blockquote>" + blocks(body) + "</blockquote>");
      } else if (RULE.test(line)) {
        out.push("<hr>");
        i++;
      } else if ((m = line.match(ITEM))) {
        const ordered = /\d/.test(m[1]);
        const items = [];
        while (i < lines.length && (m = lines[i].match(ITEM)) && /\d/.test(m[1]) === ordered) {
          items.push("<li>" + inline(m[2]) + "</li>");
          i++;
        }
        const tag = ordered ? "ol" : "ul";
        out.push("<" + tag + ">" + items.join("") + "</" + tag + ">");
      } else if (line.trim() === "") {
        i++;
      } else {
        const para = [inline(lines[i++])];
        while (i < lines.length && lines[i].trim() !== "" && !startsBlock(lines[i])) para.push(inline(lines[i++]));
        out.push("<p>" + para.join("<br>") + "</p>");
      }
    }
    return out.join("");
  }

  window.mllmMarkdown = (text) =>
    blocks(escape(String(text).replace(/\u0000/g, "").replace(/\r\n?/g, "\n")).split("\n"));
})();
