"""sim/models"""
