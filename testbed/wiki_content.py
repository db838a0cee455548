"""The MediaWiki testbed's seed content as a MediaWiki XML export (what importDump.php reads).

42 pages, made deterministically: 30 articles `Topic N` (an infobox, links to other topics and
the hub, two categories, some with a navbox or a stub notice), a `Hub` with ~40 links and
several templates, 4 templates, 6 category pages and the Main Page. The words "river" and
"mountain" occur in the text so full-text search has hits. Pure: text in, text out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from xml.sax.saxutils import escape

TOPICS = 30
KINDS = ("Rivers", "Mountains", "Cities", "Lakes", "Forests")
_WORDS = {"Rivers": "river", "Mountains": "mountain", "Cities": "city", "Lakes": "lake",
          "Forests": "forest", "Topics": "topic"}

TEMPLATES = {
    "Infobox": (
        '{| class="infobox" style="float:right; border:1px solid #aaa"\n'
        "! colspan=2 | {{{name}}}\n|-\n| Kind || [[:Category:{{{kind}}}|{{{kind}}}]]\n"
        "|-\n| Region || {{{region|unknown}}}\n|-\n| Size || {{{size|?}}} km\n|}"),
    "Navbox": ("<div class=\"navbox\">'''All topics:''' "
               + " · ".join(f"[[Topic {i}]]" for i in range(1, TOPICS + 1)) + "</div>"),
    "Stub": "''This article about {{{1|a topic}}} is a stub. You can help by expanding it.''",
    "Fact": "<sup>[''citation needed'']</sup>",
}


@dataclass(frozen=True)
class Page:
    title: str
    text: str
    namespace: int = 0


def topic_text(n: int) -> str:
    kind = KINDS[n % len(KINDS)]
    word = _WORDS[kind]
    links = sorted({1 + (n % TOPICS), 1 + ((n + 6) % TOPICS), 1 + ((n * 3) % TOPICS)} - {n})
    body = [
        f"{{{{Infobox|name=Topic {n}|kind={kind}|region=Region {1 + n % 7}|size={10 * n}}}}}",
        f"'''Topic {n}''' is a {word} in Region {1 + n % 7}.{{{{Fact}}}} Like every {word} "
        f"here it is described on the [[Hub]].",
        "",
        "== See also ==",
        *(f"* [[Topic {i}]]" for i in links),
        "",
        f"The {word} was first mapped in {1800 + 3 * n}. " * 3,
    ]
    if n % 3 == 0:
        body.append("{{Navbox}}")
    if n % 4 == 0:
        body.append(f"{{{{Stub|a {word}}}}}")
    body += [f"[[Category:{kind}]]", "[[Category:Topics]]"]
    return "\n".join(body)


def hub_text() -> str:
    lines = ["{{Infobox|name=Hub|kind=Topics|region=everywhere|size=0}}",
             "The hub lists every topic, river and mountain alike.{{Fact}}", ""]
    for kind in KINDS:
        lines.append(f"== {kind} ==")
        lines += [f"* [[Topic {i}]]{{{{Fact}}}}" for i in range(1, TOPICS + 1)
                  if KINDS[i % len(KINDS)] == kind]
        lines.append(f"See [[:Category:{kind}]].")
    lines += ["{{Navbox}}", "{{Stub|the hub}}", "[[Category:Topics]]"]
    return "\n".join(lines)


def pages() -> list[Page]:
    found = [Page("Main Page", "Welcome to the linkgrad test wiki. Start at the [[Hub]].")]
    found += [Page(f"Template:{name}", text, 10) for name, text in TEMPLATES.items()]
    found += [Page(f"Category:{kind}", f"Every {_WORDS[kind]} of the wiki.", 14)
              for kind in (*KINDS, "Topics")]
    found.append(Page("Hub", hub_text()))
    found += [Page(f"Topic {n}", topic_text(n)) for n in range(1, TOPICS + 1)]
    return found


def export_xml(items: list[Page], now_s: float | None = None, user: str = "Admin") -> str:
    """A MediaWiki export (schema 0.11): one revision per page, an hour apart and recent, so
    rebuildrecentchanges.php lists them all."""
    now_s = time.time() if now_s is None else now_s
    out = ['<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11" '
           'xml:lang="en">']
    for i, page in enumerate(items):
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ",
                              time.gmtime(now_s - 3600 * (len(items) - i)))
        out.append(f"""  <page>
    <title>{escape(page.title)}</title>
    <ns>{page.namespace}</ns>
    <revision>
      <timestamp>{stamp}</timestamp>
      <contributor><username>{escape(user)}</username></contributor>
      <comment>seeded by linkgrad</comment>
      <model>wikitext</model>
      <format>text/x-wiki</format>
      <text xml:space="preserve">{escape(page.text)}</text>
    </revision>
  </page>""")
    out.append("</mediawiki>\n")
    return "\n".join(out)
