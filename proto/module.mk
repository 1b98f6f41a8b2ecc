# proto/: protobuf-c code generated into $(B)/proto/.
PROTOS := $(wildcard proto/*.proto)
PROTO_C := $(patsubst proto/%.proto,$(B)/proto/%.pb-c.c,$(PROTOS))
PROTO_H := $(PROTO_C:.c=.h)
PROTO_O := $(PROTO_C:.c=.o)

$(B)/proto/%.pb-c.c $(B)/proto/%.pb-c.h: proto/%.proto
	@mkdir -p $(B)/proto
	protoc-c --proto_path=proto --c_out=$(B)/proto $<

$(B)/proto/%.pb-c.o: $(B)/proto/%.pb-c.c
	$(CC) $(CPPFLAGS) $(CFLAGS) -Wno-missing-prototypes -c -o $@ $<

.SECONDARY: $(PROTO_C) $(PROTO_H)
