package store

// RequestFields is requestFields, for the tests of the scripts that write request
// messages themselves.
var RequestFields = requestFields
