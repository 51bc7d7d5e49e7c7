#!/usr/bin/env python3
"""Rebuild assets/corpora from the three source packages (see README.md for their origins).

usage: rebuild.py JANEAUSTENR_DATA_DIR ITERTOOLS_CRATE_DIR HAFEZ_JSON OUT_DIR
  JANEAUSTENR_DATA_DIR  .../usr/lib/R/site-library/janeaustenr/data  (from r-cran-janeaustenr 1.0.0-1)
  ITERTOOLS_CRATE_DIR   ~/.cargo/registry/src/*/itertools-0.15.0
  HAFEZ_JSON            hafez/data/hafez.json  (from the PyPI wheel hafez 0.4.2)
"""
import gzip, json, os, re, shutil, struct, sys, zlib


class RReader:
    """Just enough of R's XDR serialization to read a lazy-load index and a character vector."""

    def __init__(self, b):
        self.b, self.i, self.symbols = b, 0, []

    def int(self):
        (v,) = struct.unpack(">i", self.b[self.i : self.i + 4])
        self.i += 4
        return v

    def read(self):
        assert self.b[:2] == b"X\n"
        self.i = 2
        version = self.int()
        self.int(), self.int()
        if version == 3:
            n = self.int()  # length of the native encoding's name, which follows
            self.i += n
        return self.item()

    def item(self):
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind == 254:  # NILVALUE
            return None
        if kind == 255:  # REFSXP: a symbol seen before
            index = flags >> 8 or self.int()
            return self.symbols[index - 1]
        if kind == 1:  # SYMSXP
            symbol = ("sym", self.item())
            self.symbols.append(symbol)
            return symbol
        if kind == 9:  # CHARSXP
            n = self.int()
            if n == -1:
                return None
            s = self.b[self.i : self.i + n].decode("utf-8")
            self.i += n
            return s
        if kind == 2:  # LISTSXP (attribute pairlists)
            attr = self.item() if has_attr else None
            tag = self.item() if has_tag else None
            return ("pair", tag, self.item(), self.item())
        if kind in (16, 19):  # STRSXP, VECSXP
            v = [self.item() for _ in range(self.int())]
        elif kind in (10, 13):  # LGLSXP, INTSXP
            v = [self.int() for _ in range(self.int())]
        else:
            raise ValueError(f"unsupported R type {kind}")
        return ("vec", v, self.item() if has_attr else None)


def austen(data_dir, name):
    index = RReader(gzip.decompress(open(os.path.join(data_dir, "Rdata.rdx"), "rb").read())).read()
    variables = index[1][0]
    names = variables[2][2][1]  # the "names" attribute
    offset, length = variables[1][names.index(name)][1]
    blob = open(os.path.join(data_dir, "Rdata.rdb"), "rb").read()[offset : offset + length]
    lines = RReader(zlib.decompress(blob[4:])).read()[1]
    return "\n".join(line or "" for line in lines) + "\n"


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def main(austen_dir, itertools_dir, hafez_json, out):
    # prose: Persuasion, one file per chapter (the title page goes with chapter 1).
    text = austen(austen_dir, "persuasion")
    parts = re.split(r"(?m)^(?=Chapter \d+$)", text)
    chapters = [parts[0] + parts[1]] + parts[2:]
    for n, chapter in enumerate(chapters, 1):
        write(f"{out}/prose/persuasion/chapter-{n:02}.txt", chapter.strip("\n") + "\n")
    # code: every source file of itertools, renamed *.rs.txt so no tool mistakes it for ours.
    for root, _, files in os.walk(os.path.join(itertools_dir, "src")):
        for f in files:
            src = os.path.join(root, f)
            rel = os.path.relpath(src, itertools_dir)
            write(f"{out}/code/itertools-0.15.0/{rel}.txt", open(src, encoding="utf-8").read())
    # persian: the verses of Hafez's ghazals, 25 ghazals per file, a blank line between ghazals.
    poems = sorted(json.load(open(hafez_json, encoding="utf-8")), key=lambda p: p["id"])
    for i in range(0, len(poems), 25):
        group = poems[i : i + 25]
        body = "\n\n".join("\n".join(p["poem"]) for p in group) + "\n"
        write(f"{out}/persian/hafez/ghazals-{group[0]['id']:03}-{group[-1]['id']:03}.txt", body)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
