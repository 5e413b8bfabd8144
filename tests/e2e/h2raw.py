"""A bare HTTP/2 client for the tests that need frame-level control (reset a
stream, stop reading, watch for GOAWAY), which curl and httpx do not give.
Requests are HPACK-encoded as literal fields without indexing (no Huffman),
so no encoder state is needed; response header blocks are not decoded (the
tests that need statuses use curl)."""
import socket
import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
CANCEL = 0x8


def _int(value, prefix_bits, first=0):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_headers(fields):
    out = b""
    for name, value in fields:
        name, value = name.encode(), value.encode()
        out += b"\x00" + _int(len(name), 7) + name + _int(len(value), 7) + value
    return out


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


class H2Conn:
    def __init__(self, port, window=None, sock=None, timeout=10.0):
        self.s = sock or socket.create_connection(("127.0.0.1", port))
        self.s.settimeout(timeout)
        self.buf = b""
        settings = b""
        if window is not None:  # SETTINGS_INITIAL_WINDOW_SIZE for our receiving side
            settings = struct.pack(">HI", 4, window)
        self.s.sendall(PREFACE + frame(SETTINGS, 0, 0, settings))
        if window is not None:
            # the connection window starts at 65535 and may not pass 2^31-1
            self.s.sendall(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", min(window, (1 << 31) - 1 - 65535))))

    def request(self, stream, method, path, headers=(), body=None, authority="x"):
        fields = [(":method", method), (":scheme", "http"), (":path", path), (":authority", authority)]
        fields += list(headers)
        block = encode_headers(fields)
        flags = END_HEADERS | (END_STREAM if body is None else 0)
        self.s.sendall(frame(HEADERS, flags, stream, block))
        if body is not None:
            self.s.sendall(frame(DATA, END_STREAM, stream, body))

    def reset(self, stream, code=CANCEL):
        self.s.sendall(frame(RST_STREAM, 0, stream, struct.pack(">I", code)))

    def next_frame(self):
        """(type, flags, stream, payload), or None at EOF.  SETTINGS and PING
        are answered on the way."""
        while True:
            while len(self.buf) < 9:
                d = self.s.recv(1 << 20)
                if not d:
                    return None
                self.buf += d
            length = int.from_bytes(self.buf[:3], "big")
            while len(self.buf) < 9 + length:
                d = self.s.recv(1 << 20)
                if not d:
                    return None
                self.buf += d
            ftype, flags = self.buf[3], self.buf[4]
            stream = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            payload = self.buf[9:9 + length]
            self.buf = self.buf[9 + length:]
            if ftype == SETTINGS and not flags & ACK:
                self.s.sendall(frame(SETTINGS, ACK, 0))
            if ftype == PING and not flags & ACK:
                self.s.sendall(frame(PING, ACK, 0, payload))
            return ftype, flags, stream, payload

    def read_until(self, pred):
        """Frames until pred(frame) is true (that frame is returned), or None at EOF."""
        while True:
            f = self.next_frame()
            if f is None or pred(f):
                return f

    def close(self):
        self.s.close()
