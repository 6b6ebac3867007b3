module github.com/ellipsis-chat/ellipsis/clients/js

go 1.26
