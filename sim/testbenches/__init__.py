"""sim/testbenches"""
