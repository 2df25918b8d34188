"""Write a one-layer image as a `docker save` tarball, for `ctr images import`: no registry,
no Docker. Used by hack/local-node.sh for the node's pause and busybox images and the wsync
image.

  mkimage.py OUT.tar NAME:TAG [--entrypoint JSON] [--cmd JSON] [--user UID:GID]
             [--file SRC:DEST[:MODE[:OWNER]]]... [--link TARGET:DEST]...
"""
import argparse
import hashlib
import io
import json
import os
import tarfile

BASE_DIRS = ["bin", "etc", "tmp", "proc", "sys", "dev", "var", "run", "home/nonroot"]
PASSWD = b"root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532::/home/nonroot:/sbin/nologin\n"
GROUP = b"root:x:0:\nnonroot:x:65532:\n"


class Layer:
    def __init__(self):
        self.buffer = io.BytesIO()
        self.tar = tarfile.open(fileobj=self.buffer, mode="w", format=tarfile.PAX_FORMAT)
        self.dirs = set()

    def directory(self, path):
        path = path.strip("/")
        if not path or path in self.dirs:
            return
        self.directory(os.path.dirname(path))
        info = tarfile.TarInfo(path)
        info.type = tarfile.DIRTYPE
        info.mode = 0o1777 if path == "tmp" else 0o755
        self.tar.addfile(info)
        self.dirs.add(path)

    def file(self, path, data, mode, owner=0):
        path = path.strip("/")
        self.directory(os.path.dirname(path))
        info = tarfile.TarInfo(path)
        info.size, info.mode, info.uid, info.gid = len(data), mode, owner, owner
        self.tar.addfile(info, io.BytesIO(data))

    def link(self, target, path):
        path = path.strip("/")
        self.directory(os.path.dirname(path))
        info = tarfile.TarInfo(path)
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
        self.tar.addfile(info)

    def bytes(self):
        self.tar.close()
        return self.buffer.getvalue()


def member(out, name, data):
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    out.addfile(info, io.BytesIO(data))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("ref")
    parser.add_argument("--entrypoint")
    parser.add_argument("--cmd")
    parser.add_argument("--user")
    parser.add_argument("--file", action="append", default=[])
    parser.add_argument("--link", action="append", default=[])
    args = parser.parse_args()

    layer = Layer()
    for path in BASE_DIRS:
        layer.directory(path)
    given = {spec.split(":")[1].strip("/") for spec in args.file}
    for path, data in [("etc/passwd", PASSWD), ("etc/group", GROUP)]:
        if path not in given:
            layer.file(path, data, 0o644)
    for spec in args.file:
        source, dest, *rest = spec.split(":")
        mode = int(rest[0], 8) if rest else 0o755
        owner = int(rest[1]) if len(rest) > 1 else 0
        with open(source, "rb") as f:
            layer.file(dest, f.read(), mode, owner)
    for spec in args.link:
        target, dest = spec.split(":")
        layer.link(target, dest)
    raw = layer.bytes()

    diff_id = "sha256:" + hashlib.sha256(raw).hexdigest()
    config = {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "WorkingDir": "/"}
    if args.entrypoint:
        config["Entrypoint"] = json.loads(args.entrypoint)
    if args.cmd:
        config["Cmd"] = json.loads(args.cmd)
    if args.user:
        config["User"] = args.user
    image = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    config_bytes = json.dumps(image, separators=(",", ":")).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id[len("sha256:"):] + "/layer.tar"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [args.ref], "Layers": [layer_name]}]).encode()
    with tarfile.open(args.out, "w") as out:
        info = tarfile.TarInfo(os.path.dirname(layer_name))
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        out.addfile(info)
        member(out, layer_name, raw)
        member(out, config_name, config_bytes)
        member(out, "manifest.json", manifest)


if __name__ == "__main__":
    main()
