#!/usr/bin/env python3
"""The floor of the original driver's start-up: a Python process that imports argparse, builds a
parser with the same flag table as neuronx-cc (tests/data/flags.tsv) and parses the command line it
is given. The original does at least this much (plus importing its Cython modules) before it can
print anything, so nxcc's whole-process dry run is compared against it."""
import argparse
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TSV = os.path.join(HERE, "..", "tests", "data", "flags.tsv")


def level(text):
    names = {"trace": 5, "debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50, "user": 60}
    if text.lower() in names:
        return names[text.lower()]
    return {0: 30, 1: 20, 2: 10}.get(int(text), int(text))


def build():
    driver = argparse.ArgumentParser(prog="neuronx-cc")
    sub = driver.add_subparsers(dest="subcommand")
    compile_ = sub.add_parser("compile")
    sub.add_parser("list-operators")
    compile_.add_argument("model_file", nargs="+")
    with open(TSV) as f:
        for row in csv.DictReader(f, delimiter="\t"):
            names = [row["flag"]] + [a for a in row["aliases"].split(",") if a]
            action, typ, dest = row["action"], row["type"], row["dest"]
            choices = row["choices"].split(",") if typ == "choice" and "(" not in row["choices"] else None
            target = driver if row["scope"] == "driver" else compile_
            if action in ("help", "help_hidden", "help_hidden_list"):
                if row["flag"] != "--help":
                    compile_.add_argument(*names, action="store_true")
                continue
            if action == "version":
                driver.add_argument(*names, action="version", version="x")
                continue
            kw = {"dest": dest}
            if action in ("store_true", "deprecated_store_true"):
                kw["action"] = "store_true"
            elif action in ("enable_disable", "noable"):
                target.add_argument(*names, action="store_true", dest=dest)
                neg = row["flag"].replace("--enable-", "--disable-", 1) if action == "enable_disable" else "--no-" + row["flag"][2:]
                target.add_argument(neg, action="store_false", dest=dest)
                continue
            elif action == "store_optional":
                kw["nargs"] = "?"
                kw["const"] = "x"
            elif action == "append":
                kw["action"] = "append"
            elif typ == "list":
                kw["nargs"] = "+"
            if typ == "int":
                kw["type"] = int
            elif typ == "float":
                kw["type"] = float
            elif typ == "level":
                kw["type"] = level
            if choices and action != "store_optional":
                kw["choices"] = [c.split(" ")[0] for c in choices]
            target.add_argument(*names, **kw)
    return driver


args, extras = build().parse_known_args(sys.argv[1:])
print(args.subcommand, len(vars(args)), extras)
