#!/usr/bin/env bash
# Real documents for the PDF/DOCX/EPUB tests and benchmarks (issue 26), from
# Debian's packages: the R manuals, gnuplot's, asymptote's and Graphviz's
# guides as PDFs (pdfTeX, Acrobat Distiller and groff producers; 1,323
# pages), the Debian Live manual as the EPUB
# Debian ships, and a DOCX pandoc makes from that EPUB. Damaged copies
# beside them: empty, truncated, random bytes after a PDF header, encrypted
# with a password, encrypted with an empty user password.
# And a two-column PDF typeset by groff (ms macros, gropdf) from the text of
# the ABF paper in ../shared/seeds, with the paragraphs it was made from, to
# check reading order across columns.
# Also installs poppler-utils (pdftotext, the page-text reference), qpdf
# (the encryption), pandoc and groff. Idempotent; everything under
# $CAPSTAN_HOME/documents.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

out="$CAPSTAN_DOCUMENTS"
# Bumped whenever the set changes, so that a kept cache is fetched again.
VERSION=2
if [ "$(cat "$out/.complete" 2>/dev/null)" = "$VERSION" ]; then
  exit 0
fi

missing=()
command -v pdftotext >/dev/null || missing+=(poppler-utils)
command -v qpdf >/dev/null || missing+=(qpdf)
command -v pandoc >/dev/null || missing+=(pandoc)
command -v gropdf >/dev/null || missing+=(groff)
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
if [ ${#missing[@]} -gt 0 ]; then
  echo "fetch-documents: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(
  cd "$tmp"
  # apt-get download runs as root here; it warns that _apt cannot write the folder.
  apt-get download -qq r-doc-pdf gnuplot-doc graphviz-doc asymptote-doc live-manual-epub 2>&1 \
    | grep -v "unsandboxed" || true
  for deb in *.deb; do dpkg-deb -x "$deb" root; done
)
root="$tmp/root/usr/share"
rm -rf "$out.partial"
mkdir -p "$out.partial/pdf" "$out.partial/books" "$out.partial/damaged"
for f in R-FAQ R-admin R-data R-exts R-intro R-ints R-lang; do
  cp "$root/R/doc/manual/$f.pdf" "$out.partial/pdf/"
done
cp "$root/doc/gnuplot/gnuplot.pdf" "$root/doc/asymptote/asymptote.pdf" "$root/doc/asymptote/CAD.pdf" \
  "$root/doc/asymptote/asy-latex.pdf" "$out.partial/pdf/"
for f in dotguide neatoguide dottyguide libguide Agraph dot.1; do
  gunzip -c "$root/doc/graphviz/pdf/$f.pdf.gz" >"$out.partial/pdf/$f.pdf"
done
cp "$root/doc/live-manual/epub/live-manual.en.epub" "$out.partial/books/live-manual.epub"
# pandoc 2.17 cannot read this EPUB (its manifest hrefs carry fragments), so it
# converts the spine's XHTML files, in reading order, to one DOCX.
mkdir "$tmp/epub"
(cd "$tmp/epub" && python3 -m zipfile -e "$out.partial/books/live-manual.epub" .)
mapfile -t spine < <(python3 - "$tmp/epub/OEBPS/content.opf" <<'PY'
import sys, xml.etree.ElementTree as ET
ns = {"opf": "http://www.idpf.org/2007/opf"}
root = ET.parse(sys.argv[1]).getroot()
items = {i.get("id"): i.get("href").split("#")[0] for i in root.iter("{%s}item" % ns["opf"])}
seen = []
for ref in root.iter("{%s}itemref" % ns["opf"]):
    href = items[ref.get("idref")]
    if href not in seen:
        seen.append(href)
print("\n".join(seen))
PY
)
(cd "$tmp/epub/OEBPS" && pandoc --quiet -f html "${spine[@]}" -o "$out.partial/books/live-manual.docx")

mkdir "$out.partial/columns"
python3 - ../shared/seeds/001_9267b4c8f5007449.txt "$out.partial/columns" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if len(p.split()) > 40][:60]
ms = [".TL", "Effective Long-Context Scaling (two columns)", ".2C"]
for i, p in enumerate(paragraphs):
    if i % 8 == 0:
        ms += [".NH", f"Section {i // 8 + 1}"]
    # A line starting with . or ' is a request to groff: indent it.
    ms += [".PP", re.sub(r"^([.'])", r" \1", p.replace("\\", "\\\\"))]
open(f"{sys.argv[2]}/two-columns.ms", "w").write("\n".join(ms) + "\n")
open(f"{sys.argv[2]}/two-columns.txt", "w").write("\n\n".join(paragraphs) + "\n")
PY
groff -ms -Tpdf "$out.partial/columns/two-columns.ms" >"$out.partial/columns/two-columns.pdf" 2>/dev/null

d="$out.partial/damaged"
: >"$d/empty.pdf"
src="$out.partial/pdf/R-data.pdf"
head -c $(($(stat -c %s "$src") / 2)) "$src" >"$d/truncated.pdf"
{ printf '%%PDF-1.5\n'; head -c 200000 /dev/urandom; } >"$d/random.pdf"
qpdf --encrypt secret owner 256 -- "$src" "$d/encrypted.pdf"
qpdf --encrypt "" owner 256 -- "$src" "$d/owner-only.pdf"
head -c 4000 "$out.partial/books/live-manual.epub" >"$d/truncated.epub"
printf 'PK\003\004 not really a zip' >"$d/fake.docx"

rm -rf "$out"
mv "$out.partial" "$out"
echo "$VERSION" >"$out/.complete"
echo "fetch-documents: $(ls "$out/pdf" | wc -l) PDFs, an EPUB, a DOCX and damaged copies in $out"
