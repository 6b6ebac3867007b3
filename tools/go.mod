module github.com/ellipsis-chat/ellipsis/tools

go 1.26

require (
	github.com/ellipsis-chat/ellipsis/shared v0.0.0
	github.com/ellipsis-chat/ellipsis/services/gateway v0.0.0
	github.com/ellipsis-chat/ellipsis/services/presence-worker v0.0.0
	github.com/ellipsis-chat/ellipsis/clients/js v0.0.0
)

replace (
	github.com/ellipsis-chat/ellipsis/shared => ../shared
	github.com/ellipsis-chat/ellipsis/services/gateway => ../services/gateway
	github.com/ellipsis-chat/ellipsis/services/presence-worker => ../services/presence-worker
	github.com/ellipsis-chat/ellipsis/clients/js => ../clients/js
)
