module github.com/ellipsis-chat/ellipsis/services/presence-worker

go 1.26

require github.com/ellipsis-chat/ellipsis/shared v0.0.0

replace github.com/ellipsis-chat/ellipsis/shared => ../../shared
