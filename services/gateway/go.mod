module github.com/ellipsis-chat/ellipsis/services/gateway

go 1.26

require github.com/ellipsis-chat/ellipsis/clients/js v0.0.0

replace github.com/ellipsis-chat/ellipsis/clients/js => ../../clients/js

require github.com/ellipsis-chat/ellipsis/shared v0.0.0

replace github.com/ellipsis-chat/ellipsis/shared => ../../shared
