#!/usr/bin/env python3
"""A trimmed, `terraform providers schema -json`-shaped schema of the hashicorp/google provider: the resources and
data sources terraform/gcp uses, each with every argument and attribute its documentation lists, read from the
provider's own repository at a release tag (website/docs/{r,d}/*.html.markdown).  Arguments the page marks
[Beta] are left out: they are not in the google (GA) provider's schema at that release.

`terraform validate` needs the provider binary from the Terraform registry; where that cannot be reached, this
file lets tests/fleet/test_fleet_gcp.py check every attribute terraform/gcp uses against the release's schema.

    git clone https://github.com/hashicorp/terraform-provider-google /tmp/tpg
    python scripts/google-provider-schema.py /tmp/tpg v6.0.0 > tests/data/google-provider-schema-6.0.0.json

What the documentation cannot give, the file does not hold: types, Required/Optional/Computed as the code
declares them, conflicts between arguments, validation of values.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

#: The types terraform/gcp uses, and the page that documents each.
RESOURCES = {
    "google_compute_network": "r/compute_network",
    "google_compute_subnetwork": "r/compute_subnetwork",
    "google_compute_router": "r/compute_router",
    "google_compute_router_nat": "r/compute_router_nat",
    "google_compute_firewall": "r/compute_firewall",
    "google_service_account": "r/google_service_account",
    "google_storage_bucket_iam_member": "r/storage_bucket_iam",
    "google_project_iam_member": "r/google_project_iam",
    "google_compute_address": "r/compute_address",
    "google_compute_instance": "r/compute_instance",
    "google_compute_instance_template": "r/compute_instance_template",
    "google_compute_region_instance_group_manager": "r/compute_region_instance_group_manager",
    "google_compute_region_autoscaler": "r/compute_region_autoscaler",
}
DATA_SOURCES = {"google_compute_zones": "d/compute_zones"}

BULLET = re.compile(r"^\s*\*\s+`([a-z0-9_/]+)`")  # `member/members`: one page, several resources
SECTION = re.compile(r"The `([a-z0-9_]+)` block (?:supports|holds)")
BETA = re.compile(r"\[Beta\]")


def parse(page: str) -> tuple[list[str], dict[str, list[str]], list[str]]:
    """(top-level arguments, {block name: its arguments}, computed attributes) of one documentation page."""
    top: list[str] = []
    sections: dict[str, list[str]] = {}
    computed: list[str] = []
    current: list[str] | None = None
    part = ""
    lines = page.splitlines()
    for number, line in enumerate(lines):
        if line.startswith("## "):
            part = line[3:].strip().lower()
            current = top if part.startswith("argument") else computed if part.startswith("attribute") else None
            continue
        if current is None:
            continue
        if line.strip() == "- - -" and part.startswith("argument"):  # the optional top-level arguments follow
            current = top
            continue
        section = SECTION.search(line)
        if section and not BULLET.match(line):
            current = sections.setdefault(section.group(1), [])
            continue
        bullet = BULLET.match(line)
        if not bullet:
            continue
        # A bullet's text runs on until the next bullet or blank line: [Beta] there means not in GA.
        text = [line]
        for following in lines[number + 1:]:
            if not following.strip() or BULLET.match(following) or following.startswith("#"):
                break
            text.append(following)
        if BETA.search(" ".join(text)):
            continue
        for name in bullet.group(1).split("/"):
            if name not in current:
                current.append(name)
    return top, sections, computed


def block(names: list[str], sections: dict[str, list[str]], seen: frozenset[str] = frozenset()) -> dict:
    """Terraform's schema shape: a name with a section of its own is a nested block, the rest attributes."""
    attributes, block_types = {}, {}
    for name in names:
        if name in sections and name not in seen:
            block_types[name] = {"block": block(sections[name], sections, seen | {name})}
        else:
            attributes[name] = {}
    return {"attributes": dict(sorted(attributes.items())), "block_types": dict(sorted(block_types.items()))}


def schema(repo: str, tag: str) -> dict:
    def page(path: str) -> str:
        return subprocess.run(["git", "-C", repo, "show", f"{tag}:website/docs/{path}.html.markdown"],
                              capture_output=True, text=True, check=True).stdout

    def one(path: str) -> dict:
        top, sections, computed = parse(page(path))
        return {"block": block(top + [c for c in computed if c not in top], sections)}

    commit = subprocess.run(["git", "-C", repo, "rev-list", "-n", "1", tag], capture_output=True, text=True,
                            check=True).stdout.strip()
    return {
        "format_version": "1.0",
        "source": {"repository": "https://github.com/hashicorp/terraform-provider-google", "tag": tag,
                   "commit": commit, "license": "MPL-2.0 (the provider's repository, its documentation included)",
                   "made_by": "scripts/google-provider-schema.py",
                   "from": "website/docs/{r,d}/*.html.markdown: every documented argument and attribute, "
                           "[Beta] ones left out"},
        "provider_schemas": {"registry.terraform.io/hashicorp/google": {
            "resource_schemas": {name: one(path) for name, path in RESOURCES.items()},
            "data_source_schemas": {name: one(path) for name, path in DATA_SOURCES.items()},
        }},
    }


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: google-provider-schema.py PROVIDER_CHECKOUT TAG")
    json.dump(schema(sys.argv[1], sys.argv[2]), sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")
