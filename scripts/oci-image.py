#!/usr/bin/python3
"""oci-image.py ROOTFS NAME:TAG OUT.tar — writes the OCI image archive of a
root filesystem: one gzip layer, the config (entrypoint gshare-agent, PATH),
the manifest, index.json and oci-layout (OCI image layout 1.0), plus Docker's
manifest.json, so that the one file is read by

  ctr -n k8s.io images import OUT.tar                  (containerd)
  skopeo copy oci-archive:OUT.tar docker://REGISTRY/gshare:TAG
  docker load -i OUT.tar

Written for gshare's `make image`; no registry and no daemon are needed.
Device nodes under /dev are left out (the runtime provides /dev).  A ROOTFS
with a file system mounted under it (a /proc that mmdebstrap left, say) is
refused, naming the mount: the layer holds the tree's own files only.
"""
import gzip
import hashlib
import io
import json
import os
import re
import stat
import sys
import tarfile

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


def mounts_under(root):
    """The mount points strictly under root (/proc/self/mountinfo's fifth
    field, octal escapes decoded)."""
    top = os.path.realpath(root).rstrip("/") + "/"
    found = []
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            mp = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), line.split()[4])
            mp = os.fsdecode(mp)
            if mp.startswith(top):
                found.append(mp)
    return sorted(found)


def layer_tar(root, out):
    """Writes the tar of root to the binary file out, sorted, numeric owners."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as t:
        for d, dirs, files in os.walk(root):
            dirs.sort()
            rel = os.path.relpath(d, root)
            for n in sorted(dirs + files):
                p = os.path.join(d, n)
                arc = n if rel == "." else os.path.join(rel, n)
                st = os.lstat(p)
                if arc.startswith("dev/") and (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
                    continue
                if stat.S_ISSOCK(st.st_mode):
                    continue
                ti = t.gettarinfo(p, arc)
                ti.uname = ti.gname = ""
                if ti.isreg():
                    with open(p, "rb") as f:
                        t.addfile(ti, f)
                else:
                    t.addfile(ti)


def main(argv):
    if len(argv) != 3:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    root, name, out = argv
    if ":" not in name.rsplit("/", 1)[-1]:
        print("oci-image: %s: the name needs a :tag" % name, file=sys.stderr)
        return 2
    tag = name.rsplit(":", 1)[1]
    mounted = mounts_under(root)
    if mounted:
        print("oci-image: %s has a file system mounted under it: %s; the image must not include it: "
              "unmount it (umount -R PATH) and run again" % (root, ", ".join(mounted)), file=sys.stderr)
        return 1
    raw = io.BytesIO()
    layer_tar(root, raw)
    diff_id = "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", compresslevel=6, mtime=0) as g:
        g.write(raw.getvalue())
    layer = gz.getvalue()
    del raw
    config = {
        "architecture": "amd64", "os": "linux",
        "config": {
            "Entrypoint": ["/usr/local/bin/gshare-agent"],
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Labels": {"org.opencontainers.image.title": "gshare",
                       "org.opencontainers.image.version": tag},
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "make image (scripts/mkimage.sh, scripts/oci-image.py)"}],
    }
    blobs = {}

    def blob(data):
        d = hashlib.sha256(data).hexdigest()
        blobs[d] = data
        return "sha256:" + d

    cfg_bytes = json.dumps(config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": blob(cfg_bytes), "size": len(cfg_bytes)},
        "layers": [{"mediaType": OCI_LAYER, "digest": blob(layer), "size": len(layer)}],
    }
    man_bytes = json.dumps(manifest, sort_keys=True).encode()
    index = {
        "schemaVersion": 2, "mediaType": OCI_INDEX,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": blob(man_bytes), "size": len(man_bytes),
                       "platform": {"architecture": "amd64", "os": "linux"},
                       "annotations": {"io.containerd.image.name": name,
                                       "org.opencontainers.image.ref.name": tag}}],
    }
    docker = [{"Config": "blobs/sha256/" + manifest["config"]["digest"][7:], "RepoTags": [name],
               "Layers": ["blobs/sha256/" + manifest["layers"][0]["digest"][7:]]}]
    tmp = out + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as t:
        def add(arc, data):
            ti = tarfile.TarInfo(arc)
            ti.size = len(data)
            ti.mode = 0o644
            t.addfile(ti, io.BytesIO(data))
        add("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add("index.json", json.dumps(index, sort_keys=True).encode())
        add("manifest.json", json.dumps(docker).encode())
        for d in sorted(blobs):
            add("blobs/sha256/" + d, blobs[d])
    os.rename(tmp, out)
    print("oci-image: %s %s, layer %d bytes (%s)" % (out, name, len(layer), manifest["layers"][0]["digest"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
